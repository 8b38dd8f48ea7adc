package bundle

import (
	"crypto/x509"
	"slices"
)

// Rule: repair.
//
// The gateway Secret is dualca's own; what someone changes in it by hand is
// undone, with a Warning, and never trusted more than what dualca wrote:
//
//   - an edited ca.crt (its hash is not the one recorded) keeps only the
//     roots dualca recorded, so a hand-added CA is removed and garbage is
//     dropped (GatewayRepaired, raised by trustedRoots);
//   - a server credential that is missing, does not match its key, or no
//     longer chains to the server root dualca recorded is replaced by one
//     from the current root (ServerSwitchForced).

// repairedRoots returns the roots dualca recorded for an edited ca.crt. A
// recorded root whose bytes the edit removed is taken back from the
// clients' ca.crt, where cert-manager put it when it issued their leaves.
func repairedRoots(gw Gateway, clients Clients) []*x509.Certificate {
	all := casIn(gw.CAPEM)
	for _, c := range clients.Items {
		all = append(all, c.CA...)
	}
	var roots []*x509.Certificate
	for _, c := range all {
		if isCA(c) && slices.Contains(gw.State.BundleRoots, Fingerprint(c)) {
			roots = append(roots, c)
		}
	}
	return roots
}

// recordedServer returns the server credential found in the gateway if it
// is usable (readServer) and, unless adopting, chains to the server root
// dualca recorded: one replaced by hand is not dualca's credential. nil
// means the server must be replaced (see decideSwitch).
func (p *planning) recordedServer(trusted []*x509.Certificate) *serverCredential {
	found := readServer(p.gw, append(trusted, p.root.Cert), p.clients.Memory)
	if found != nil && found.selfSigned && !p.fromRootSecret(found.root) {
		// A CA with its key in tls.crt that dualca never read from the
		// root Secret: issuing from it, or cross-signing it, would lend
		// the root's trust to someone else's key.
		p.readFromRoot([]*x509.Certificate{found.root}, "tls.crt")
		return nil
	}
	if found != nil && !p.adopting && Fingerprint(found.root) != p.gw.State.Server {
		return nil
	}
	return found
}

// serverReplaced is the switch that replaces a server credential found
// missing or changed outside dualca.
func serverReplaced(root *Root) switchDecision {
	return switchDecision{switchNow: true, event: &Event{Warning: true, Reason: ReasonServerSwitchForced,
		Message: "server credential in the gateway Secret was missing or changed outside dualca; serving from root " + describe(root.Cert)}}
}
