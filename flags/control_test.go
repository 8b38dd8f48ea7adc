package flags

import (
	"bytes"
	"flag"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

// TestOperatorCommandsNameTheStatusConfigMap: pause, resume, promote and
// status take the status ConfigMap, or derive dualca's default from the
// gateway Secret, and nothing else names an object.
func TestOperatorCommandsNameTheStatusConfigMap(t *testing.T) {
	tests := map[string]struct {
		args    []string
		want    types.NamespacedName
		wantErr string
	}{
		"the configmap":                   {args: []string{"--status-configmap=dualca/gw-status"}, want: types.NamespacedName{Namespace: "dualca", Name: "gw-status"}},
		"the default of the gateway":      {args: []string{"--gateway-secret=agents/gw"}, want: types.NamespacedName{Namespace: "agents", Name: "gw-dualca-status"}},
		"neither":                         {args: []string{}, wantErr: "--status-configmap is required"},
		"both":                            {args: []string{"--gateway-secret=agents/gw", "--status-configmap=a/b"}, wantErr: "not both"},
		"a malformed configmap":           {args: []string{"--status-configmap=gw"}, wantErr: `--status-configmap="gw": want NAMESPACE/NAME`},
		"a malformed gateway":             {args: []string{"--gateway-secret=NS/gw"}, wantErr: `namespace "NS"`},
		"a stray argument is named":       {args: []string{"--gateway-secret=agents/gw", "now"}, wantErr: `unexpected argument "now"`},
		"a derived name that is too long": {args: []string{"--gateway-secret=agents/" + string(bytes.Repeat([]byte("g"), 250))}, wantErr: "give --status-configmap"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			c, cerr := ParseControl("dualca pause", "holds the rotation", tc.args)
			s, serr := ParseStatus("dualca status", tc.args)
			if tc.wantErr != "" {
				g.Expect(cerr).To(MatchError(ContainSubstring(tc.wantErr)))
				g.Expect(serr).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(cerr).NotTo(HaveOccurred())
			g.Expect(serr).NotTo(HaveOccurred())
			g.Expect(c.StatusConfigMap).To(Equal(tc.want))
			g.Expect(s.StatusConfigMap).To(Equal(tc.want))
			g.Expect(s.StalledAfter).To(Equal(time.Hour))
			g.Expect(s.Output).To(Equal("text"))
		})
	}
}

// TestTheDerivedConfigMapIsDualcasDefault: --gateway-secret finds the
// ConfigMap dualca publishes to when run with that gateway and no
// --status-configmap.
func TestTheDerivedConfigMapIsDualcasDefault(t *testing.T) {
	g := NewWithT(t)
	o, err := Parse("dualca", []string{"--root-secret=cm/root", "--gateway-secret=istio-system/gw", "--server-dns-names=gw.example.com"})
	g.Expect(err).NotTo(HaveOccurred())
	c, err := ParseControl("dualca pause", "", []string{"--gateway-secret=istio-system/gw"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.StatusConfigMap).To(Equal(o.StatusConfigMap))
}

// TestStatusNeedsNoSecret: the flags that named Secrets are refused with
// why, and left out of the help.
func TestStatusNeedsNoSecret(t *testing.T) {
	for _, f := range []string{"--root-secret=cm/root", "--client-selector=app=agent", "--client-namespaces=a"} {
		t.Run(f, func(t *testing.T) {
			g := NewWithT(t)
			_, err := ParseStatus("dualca status", []string{"--gateway-secret=agents/gw", f})
			g.Expect(err).To(MatchError(And(ContainSubstring("is no longer needed"), ContainSubstring("reads only the status ConfigMap"))))
		})
	}
	t.Run("help", func(t *testing.T) {
		g := NewWithT(t)
		var out bytes.Buffer
		fs := flag.NewFlagSet("dualca status", flag.ContinueOnError)
		fs.SetOutput(&out)
		gone := removed(fs, "why", "root-secret")
		fs.String("stalled-after", "1h", "stalled")
		usage(fs, "dualca status", "help", gone)()
		g.Expect(out.String()).To(And(ContainSubstring("-stalled-after"), Not(ContainSubstring("root-secret"))))
	})
	t.Run("output and stalled-after are checked", func(t *testing.T) {
		g := NewWithT(t)
		_, err := ParseStatus("dualca status", []string{"--gateway-secret=agents/gw", "-o=yaml", "--stalled-after=0s"})
		g.Expect(err).To(MatchError(And(ContainSubstring(`-o="yaml": want text or json`), ContainSubstring("--stalled-after must be positive"))))
	})
}

// TestControlsTakeNoSecret: a control command has no flag naming a Secret
// but the gateway's, whose name alone it uses.
func TestControlsTakeNoSecret(t *testing.T) {
	g := NewWithT(t)
	_, err := ParseControl("dualca pause", "", []string{"--gateway-secret=agents/gw", "--root-secret=a/b"})
	g.Expect(err).To(MatchError(ContainSubstring("flag provided but not defined: -root-secret")))
}
