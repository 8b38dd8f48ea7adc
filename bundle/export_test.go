package bundle

import "github.com/dualca/dualca/bundle/internal/memo"

// SignaturesSize is how many pairs and certificates s remembers, for the
// tests of its bound.
func SignaturesSize(s *Signatures) (pairs, certificates int) { return s.size() }

// MinSweep is the size under which a memo.Recent is not swept.
const MinSweep = memo.MinSweep

// SignaturesAsked is how many answers s keeps for the current generation.
func SignaturesAsked(s *Signatures) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers.Len()
}

// SignaturesComputed is how many bonds of a client to a root s has
// computed, for the tests of their reuse.
func SignaturesComputed(s *Signatures) uint64 { return s.bonds.Computed() }

// SignaturesBondRoots is how many roots s keeps bonds for.
func SignaturesBondRoots(s *Signatures) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bonds.Roots()
}
