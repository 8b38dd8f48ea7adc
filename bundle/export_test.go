package bundle

// SignaturesSize is how many pairs and certificates s remembers, for the
// tests of its bound.
func SignaturesSize(s *Signatures) (pairs, certificates int) { return s.size() }

// MinSweep is the size under which an aging map is not swept.
const MinSweep = minSweep

// SignaturesAsked is how many answers s keeps for the current generation.
func SignaturesAsked(s *Signatures) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.asked)
}

// SignaturesComputed is how many bonds of a client to a root s has
// computed, for the tests of their reuse.
func SignaturesComputed(s *Signatures) uint64 { return s.computed.Load() }

// SignaturesBondRoots is how many roots s keeps bonds for.
func SignaturesBondRoots(s *Signatures) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bonds)
}
