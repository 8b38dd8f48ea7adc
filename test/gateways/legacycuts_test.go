package gateways

import (
	"testing"

	. "github.com/onsi/gomega"
)

// TestLegacyCutsNameThePairsNeverCutOff: a pair missed by one legacy
// scenario but cut off by another passes; a pair no scenario cut off is
// named, once.
func TestLegacyCutsNameThePairsNeverCutOff(t *testing.T) {
	g := NewWithT(t)
	c := &legacyCuts{failed: map[string]int{}}
	c.add("haproxy × curl", 0)
	c.add("haproxy × curl", 3)
	c.add("nginx × curl", 0)
	c.add("nginx × curl", 0)
	c.add("traefik × gnutls-cli", 1)
	g.Expect(c.uncut()).To(Equal([]string{"nginx × curl"}))
}
