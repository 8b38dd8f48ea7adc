package gateways

import (
	"testing"

	. "github.com/onsi/gomega"
)

// TestLegacyCutsNameThePairsNeverCutOff: a pair missed by one legacy
// scenario but cut off by another passes; a pair no scenario cut off is
// named, once; a zero-downtime row counts for nothing.
func TestLegacyCutsNameThePairsNeverCutOff(t *testing.T) {
	g := NewWithT(t)
	var tb table
	tb.add(row{Gateway: "haproxy", Stack: "curl", Shape: "a"}, true, cell{Handshakes: 20})
	tb.add(row{Gateway: "haproxy", Stack: "curl", Shape: "b"}, true, cell{Handshakes: 20, Failed: 3})
	tb.add(row{Gateway: "nginx", Stack: "curl", Shape: "a"}, true, cell{Handshakes: 20})
	tb.add(row{Gateway: "nginx", Stack: "curl", Shape: "b"}, true, cell{Handshakes: 20})
	tb.add(row{Gateway: "traefik", Stack: "gnutls-cli", Shape: "a"}, true, cell{Handshakes: 20, Failed: 1})
	tb.add(row{Gateway: "traefik", Stack: "curl", Shape: "a"}, false, cell{Handshakes: 20})
	g.Expect(tb.uncutByLegacy()).To(Equal([]string{"nginx × curl"}))
}
