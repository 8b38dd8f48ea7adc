package main

import (
	"bytes"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dualca/dualca/flags"
)

// TestTheCommands: help lists every command and run's flags; version
// prints what -ldflags set; an unknown command is a usage error. None of
// these reach a cluster (no kubeconfig here).
func TestTheCommands(t *testing.T) {
	t.Setenv("KUBECONFIG", "/nonexistent")
	tests := map[string]struct {
		args   []string
		code   int
		stdout []string
		stderr string
		// stderrFirst is how stderr begins: the error comes before the
		// usage.
		stderrFirst string
		noStdout    bool
		setVersion  bool
	}{
		"--help lists the commands, then run's flags": {args: []string{"--help"}, stdout: []string{
			"dualca [run] [flags]", "dualca status [flags]", "dualca version", "-root-secret", "-cert-management-legacy"}},
		"help is --help": {args: []string{"help"}, stdout: []string{"dualca status [flags]"}},
		"-h is --help":   {args: []string{"-h"}, stdout: []string{"dualca version"}},
		"version prints the version, commit and Go version": {args: []string{"version"}, setVersion: true,
			stdout: []string{"dualca 1.2.3 (commit abc123, go1."}},
		"an unknown command is a usage error": {args: []string{"rotate"}, code: 2, stderr: `unknown command "rotate"`, noStdout: true},
		"run --help is --help, on stdout":     {args: []string{"run", "--help"}, stdout: []string{"dualca [run] [flags]", "-root-secret"}},
		"a bad flag of run: the error, then the usage, exit 2": {args: []string{"--bogus"}, code: 2, noStdout: true,
			stderrFirst: "dualca: invalid flags: flag provided but not defined: -bogus\n\n", stderr: "dualca [run] [flags]"},
		"an invalid value of run: the error, then the usage, exit 2": {args: []string{"--root-secret=a/b", "--gateway-secret=x"}, code: 2, noStdout: true,
			stderrFirst: `dualca: invalid flags: --gateway-secret="x": want NAMESPACE/NAME`, stderr: "-cert-management-legacy"},
		"run failing after its flags exits 1, without the usage": {args: []string{"--root-secret=a/b", "--gateway-secret=a/c", "--server-without-names"}, code: 1, noStdout: true,
			stderrFirst: "dualca: loading kubeconfig"},
		"status --help, on stdout": {args: []string{"status", "--help"}, stdout: []string{"Usage: dualca status", "-stalled-after"}},
		"a bad flag of status: the error, then its usage, exit 2": {args: []string{"status", "--bogus"}, code: 2, noStdout: true,
			stderrFirst: "dualca status: invalid flags: flag provided but not defined: -bogus\n\nUsage: dualca status", stderr: "-stalled-after"},
		"a missing flag of pause: the error, then its usage, exit 2": {args: []string{"pause"}, code: 2, noStdout: true,
			stderrFirst: "dualca pause: invalid flags: ", stderr: "Usage: dualca pause"},
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
			g.Expect(stderr.String()).To(HavePrefix(tc.stderrFirst))
			if tc.code != 2 {
				g.Expect(stderr.String()).NotTo(ContainSubstring("Usage"), "the usage is for a command line that cannot run")
			}
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

// On a terminal dualca logs console lines unless --zap-encoder chose;
// elsewhere (a pod's log) JSON, as before.
func TestLogsAreForPeopleOnATerminal(t *testing.T) {
	g := NewWithT(t)
	line := func(args []string, terminal bool) string {
		opts, err := flags.Parse("dualca", append([]string{"--root-secret=a/b", "--gateway-secret=a/c", "--server-without-names"}, args...))
		g.Expect(err).NotTo(HaveOccurred())
		humanLogs(&opts.Zap, terminal)
		var out bytes.Buffer
		opts.Zap.DestWriter = &out
		ctrlzap.New(ctrlzap.UseFlagOptions(&opts.Zap)).Info("hello", "root", "abc")
		return out.String()
	}
	g.Expect(line(nil, false)).To(HavePrefix("{"), "JSON off a terminal")
	g.Expect(line(nil, true)).NotTo(HavePrefix("{"), "console lines on a terminal")
	g.Expect(line(nil, true)).To(ContainSubstring("hello"))
	g.Expect(line([]string{"--zap-encoder=json"}, true)).To(HavePrefix("{"), "--zap-encoder chooses, also on a terminal")
}
