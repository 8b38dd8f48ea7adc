package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

// gateway is what one version of the gateway Secret says, without any key
// material: the demo keeps parsed certificates only.
type gateway struct {
	version  string // resourceVersion
	strategy string
	phase    string
	server   *x509.Certificate   // the root tls.crt is or chains to; nil if none in ca.crt
	leaf     *x509.Certificate   // the certificate tls.crt presents
	crosses  int                 // cross-certificates sent after it
	roots    []*x509.Certificate // ca.crt, in order
	seenAt   time.Time           // when the demo read it
}

// readGateway reads the gateway Secret; nil without error while it does not exist.
func readGateway(ctx context.Context, c client.Client) (*gateway, error) {
	var secret corev1.Secret
	err := c.Get(ctx, gatewayKey, &secret)
	seenAt := time.Now()
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading gateway Secret %s: %w", gatewayKey, err)
	}
	server, err := bundle.ParseCertificates(corev1.TLSCertKey, secret.Data[corev1.TLSCertKey])
	if err != nil {
		return nil, fmt.Errorf("gateway Secret %s: %w", gatewayKey, err)
	}
	roots, err := bundle.ParseCertificates("ca.crt", secret.Data["ca.crt"])
	if err != nil {
		return nil, fmt.Errorf("gateway Secret %s: %w", gatewayKey, err)
	}
	state := bundle.ParseState(secret.Annotations)
	g := &gateway{
		version:  secret.ResourceVersion,
		strategy: state.Strategy,
		phase:    string(state.Phase),
		leaf:     server[0],
		crosses:  len(server) - 1,
		roots:    roots,
		seenAt:   seenAt,
	}
	for _, r := range roots {
		if bundle.ChainsTo(g.leaf, r) {
			g.server = r
			break
		}
	}
	return g, nil
}

// trusts reports whether ca.crt holds c.
func (g *gateway) trusts(c *x509.Certificate) bool { return bundle.Contains(g.roots, c) }

// serves reports whether tls.crt is or chains to root c.
func (g *gateway) serves(c *x509.Certificate) bool {
	return g.server != nil && bundle.Fingerprint(g.server) == bundle.Fingerprint(c)
}

// snapshot prints a numbered step and the gateway Secret as a small table.
func (s *story) snapshot(title string, g *gateway) {
	s.step++
	fmt.Printf("\n[%d] %s\n", s.step, title)
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "    strategy\t%s\n", dash(g.strategy))
	fmt.Fprintf(tw, "    phase\t%s\n", dash(g.phase))
	kind := "a leaf"
	if g.leaf.IsCA {
		kind = "the root itself"
	}
	fmt.Fprintf(tw, "    server\t%s: %s, %d cross-certificate(s)\n", g.leaf.Subject, kind, g.crosses)
	fmt.Fprintf(tw, "    ca.crt\tSUBJECT\tSHA-256\tNOT AFTER\t\n")
	for _, c := range g.roots {
		marker := ""
		if g.serves(c) {
			marker = "server"
		}
		fmt.Fprintf(tw, "    \t%s\t%s\t%s\t%s\n", c.Subject, short(c), c.NotAfter.UTC().Format(time.RFC3339), marker)
	}
	_ = tw.Flush()
	// tabwriter pads every cell, even the last one of a row; trim that.
	for _, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
		fmt.Println(strings.TrimRight(line, " "))
	}
}

// describe names a certificate for a human: subject and fingerprint prefix.
func describe(c *x509.Certificate) string {
	return fmt.Sprintf("%s (SHA-256 %s…)", c.Subject, short(c))
}

func short(c *x509.Certificate) string { return bundle.Short(bundle.Fingerprint(c)) }

// dash shows an absent value as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
