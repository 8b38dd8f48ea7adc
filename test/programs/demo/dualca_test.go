package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dualca/dualca/test/lib/certs"
)

func TestPrefixWriterCountsLinesWithKeyMaterial(t *testing.T) {
	t.Parallel()
	ca := certs.MustCA(t, "root-ca", time.Hour)
	cert, key := string(ca.CertPEM), string(ca.KeyPEM)
	body := func(pem string) string { return strings.Split(pem, "\n")[1] } // the first base64 line
	tests := map[string]struct {
		log       string
		wantLeaks int
	}{
		"log lines naming roots by fingerprint are fine": {
			log: `{"level":"info","msg":"root rotated","fingerprint":"e3e1175a35ab"}` + "\n",
		},
		"a PEM header is a leak":                    {log: `{"msg":"x","data":"` + cert[:27] + "\"}\n", wantLeaks: 1},
		"a certificate's base64 body is a leak":     {log: "data: " + body(cert) + "\n", wantLeaks: 1},
		"an EC private key's base64 body is a leak": {log: "key=" + body(key) + "\n", wantLeaks: 1},
		"an unterminated last line is counted too":  {log: strings.TrimSuffix(key, "\n"), wantLeaks: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := &prefixWriter{prefix: "dualca| "}
			// Written in two pieces, split inside a line.
			_, _ = w.Write([]byte(tc.log[:len(tc.log)/2]))
			_, _ = w.Write([]byte(tc.log[len(tc.log)/2:]))
			if _, leaks := w.counts(); leaks != tc.wantLeaks {
				t.Errorf("leaks = %d, want %d", leaks, tc.wantLeaks)
			}
		})
	}
}
