package main

import (
	"bytes"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
)

// TestTheCommands: help lists every command and run's flags; version
// prints what -ldflags set; an unknown command is a usage error. None of
// these reach a cluster (no kubeconfig here).
func TestTheCommands(t *testing.T) {
	t.Setenv("KUBECONFIG", "/nonexistent")
	tests := map[string]struct {
		args       []string
		code       int
		stdout     []string
		stderr     string
		noStdout   bool
		setVersion bool
	}{
		"--help lists the commands, then run's flags": {args: []string{"--help"}, stdout: []string{
			"dualca [run] [flags]", "dualca status [flags]", "dualca version", "-root-secret", "-cert-management-legacy"}},
		"help is --help": {args: []string{"help"}, stdout: []string{"dualca status [flags]"}},
		"-h is --help":   {args: []string{"-h"}, stdout: []string{"dualca version"}},
		"version prints the version, commit and Go version": {args: []string{"version"}, setVersion: true,
			stdout: []string{"dualca 1.2.3 (commit abc123, go1."}},
		"an unknown command is a usage error": {args: []string{"rotate"}, code: 2, stderr: `unknown command "rotate"`, noStdout: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			if tc.setVersion {
				defer func(v, r string) { version, revision = v, r }(version, revision)
				version, revision = "1.2.3", "abc123"
			}
			var stdout, stderr bytes.Buffer
			g.Expect(dispatch(tc.args, &stdout, &stderr)).To(Equal(tc.code))
			for _, want := range tc.stdout {
				g.Expect(stdout.String()).To(ContainSubstring(want))
			}
			g.Expect(stderr.String()).To(ContainSubstring(tc.stderr))
			if tc.noStdout {
				g.Expect(stdout.String()).To(BeEmpty())
			}
		})
	}
}

// TestBuildInfoIsRegisteredOnce: run registers dualca_build_info on every
// call in a process (tests start several managers); the first gauge stays
// and the second call is not an error.
func TestBuildInfoIsRegisteredOnce(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	b := buildInfo{Version: "1.2.3", Revision: "abc123", GoVersion: "go1.99"}
	g.Expect(registerBuildInfo(reg, b)).To(Succeed())
	g.Expect(registerBuildInfo(reg, buildInfo{Version: "other"})).To(Succeed())
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var labels []map[string]string
	for _, f := range families {
		if f.GetName() != "dualca_build_info" {
			continue
		}
		for _, m := range f.GetMetric() {
			g.Expect(m.GetGauge().GetValue()).To(Equal(1.0))
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			labels = append(labels, l)
		}
	}
	g.Expect(labels).To(ConsistOf(map[string]string{"version": "1.2.3", "revision": "abc123", "goversion": "go1.99"}))
}
