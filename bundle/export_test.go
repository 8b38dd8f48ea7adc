package bundle

// SignaturesSize is how many pairs and certificates s remembers, for the
// tests of its bound.
func SignaturesSize(s *Signatures) (pairs, certificates int) { return s.size() }

// MinSweep is the size under which an aging map is not swept.
const MinSweep = minSweep
