package cluster

// IssuedBetween lets the tests check the lookup behind Rotation.Passed,
// which cert-manager's double issuances reach only now and then.
var IssuedBetween = (*Cluster).issuedBetween
