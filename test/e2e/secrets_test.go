package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// TestNothingDualcaEmitsHoldsKeyMaterial: after a zero-downtime rotation
// (a new root and server key, every client re-issued), dualca's log, the
// events of the namespace and its metrics hold no fragment of any key or
// certificate of the namespace.
func TestNothingDualcaEmitsHoldsKeyMaterial(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	s.startDualca(s.options(false))
	s.startTraffic()
	r2 := s.rotate()
	s.converged(r2, false, 60*time.Second)
	fragments, scanned := s.expectNoSecretMaterial()
	s.g.Expect(fragments).To(BeNumerically(">", 2*len(s.clients)), "every client's key and certificate were looked for")
	t.Logf("secrets stay secret: %d fragments of the namespace's keys and certificates looked for in %d bytes of dualca's log, events and metrics: none found", fragments, scanned)
}

// expectNoSecretMaterial checks that nothing dualca emitted during the
// scenario carries key or certificate bytes: its log, the events of the
// namespace (both APIs) and a scrape of its metrics are searched for every
// PEM marker, for each line of every PEM body in the namespace's Secrets
// (roots, gateway, clients: keys and certificates), and for the base64 of
// their DER and of their PEM, as the API would encode them. It returns how
// many fragments it looked for in how many bytes.
func (s *scenario) expectNoSecretMaterial() (fragments, scanned int) {
	s.t.Helper()
	var secrets corev1.SecretList
	s.g.Expect(s.c.Client.List(s.ctx, &secrets, client.InNamespace(s.ns))).To(Succeed())
	needles := map[string]bool{"-----BEGIN": true, "PRIVATE KEY": true}
	for _, sec := range secrets.Items {
		for _, data := range sec.Data {
			if len(data) > 0 {
				needles[base64.StdEncoding.EncodeToString(data)[:40]] = true
			}
			for rest := data; ; {
				var b *pem.Block
				if b, rest = pem.Decode(rest); b == nil {
					break
				}
				needles[base64.StdEncoding.EncodeToString(b.Bytes)[:40]] = true
				body := pem.EncodeToMemory(b)
				for _, line := range bytes.Split(body, []byte("\n")) {
					if len(line) >= 40 && !bytes.HasPrefix(line, []byte("-----")) {
						needles[string(line[:40])] = true
					}
				}
			}
		}
	}

	var haystack strings.Builder
	haystack.WriteString(s.dualca.Log())
	var events eventsv1.EventList
	s.g.Expect(s.c.Client.List(s.ctx, &events, client.InNamespace(s.ns))).To(Succeed())
	for _, e := range events.Items {
		haystack.WriteString(e.Note + "\n" + e.Reason + "\n")
	}
	var core corev1.EventList
	s.g.Expect(s.c.Client.List(s.ctx, &core, client.InNamespace(s.ns))).To(Succeed())
	for _, e := range core.Items {
		haystack.WriteString(e.Message + "\n" + e.Reason + "\n")
	}
	// The status dualca publishes (the operator reads it with no Secret
	// access), and what dualca writes in the metadata of its Secrets (the
	// gateway's and its record's annotations: digests and fingerprints).
	var configMaps corev1.ConfigMapList
	s.g.Expect(s.c.Client.List(s.ctx, &configMaps, client.InNamespace(s.ns),
		client.MatchingLabels{"app.kubernetes.io/managed-by": "dualca"})).To(Succeed())
	published := 0
	for _, cm := range configMaps.Items {
		for k, v := range cm.Data {
			haystack.WriteString(k + "\n" + v + "\n")
			published++
		}
		for k, v := range cm.Annotations {
			haystack.WriteString(k + "=" + v + "\n")
		}
	}
	s.g.Expect(published).To(BeNumerically(">", 0), "dualca published a status to search")
	for _, sec := range secrets.Items {
		for k, v := range sec.Annotations {
			haystack.WriteString(k + "=" + v + "\n")
		}
		for k, v := range sec.Labels {
			haystack.WriteString(k + "=" + v + "\n")
		}
	}
	families, err := metrics.Registry.Gather()
	s.g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		_, err := expfmt.MetricFamilyToText(&haystack, f)
		s.g.Expect(err).NotTo(HaveOccurred())
	}
	text := haystack.String()
	s.g.Expect(len(events.Items)).To(BeNumerically(">", 0), "the scenario produced events to search")
	for needle := range needles {
		s.g.Expect(text).NotTo(ContainSubstring(needle), "dualca's log, events or metrics contain key or certificate material")
	}
	return len(needles), len(text)
}
