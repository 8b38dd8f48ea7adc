// Package operator is the operator's command line: `dualca status` reads
// the report dualca publishes in its status ConfigMap and prints it, and
// `dualca pause`, `resume` and `promote` patch that ConfigMap's control
// annotations. It talks to the API server for that one ConfigMap alone,
// and builds on syncer's public reads: the report's types and its parse
// (syncer.ParseReport), which the controller publishes.
package operator
