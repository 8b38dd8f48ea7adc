package bundle

import "github.com/dualca/dualca/bundle/internal/memo"

// MemorySize is how many pairs and certificates s remembers, for the
// tests of its bound.
func MemorySize(s *Memory) (pairs, certificates int) { return s.size() }

// MinSweep is the size under which a memo.Recent is not swept.
const MinSweep = memo.MinSweep

// MemoryAsked is how many answers s keeps for the current generation.
func MemoryAsked(s *Memory) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers.Len()
}

// MemoryComputed is how many bonds of a client to a root s has
// computed, for the tests of their reuse.
func MemoryComputed(s *Memory) uint64 { return s.bonds.Computed() }

// MemoryBondRoots is how many roots s keeps bonds for.
func MemoryBondRoots(s *Memory) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bonds.Roots()
}
