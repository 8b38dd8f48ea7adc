// Package bundle validates and assembles the trust bundle that dualca
// publishes in the gateway Secret's ca.crt.
//
// During a root CA rotation clients must trust both the new cert-manager root
// and the roots that are being retired, so ca.crt holds a small set of root
// certificates rather than a single one. This package holds the pure parts of
// that job: strict parsing of the PEM found in Secrets (input may have been
// edited by hand, so anything unexpected is rejected with an InvalidError
// that is safe to show in an event or log line), validation of root CA
// Secrets, and a canonical, deterministic encoding of the trust set so that
// the gateway reloads only when the set really changes.
//
// The package depends only on the standard library and never reads the clock:
// every time-dependent function takes the current time as a parameter, which
// keeps decisions reproducible in tests.
package bundle
