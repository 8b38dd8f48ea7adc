package flags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
)

// The operator's commands, `dualca status`, `dualca pause`, `dualca
// resume` and `dualca promote`, read and patch one object: the status
// ConfigMap dualca publishes (--status-configmap), named directly or
// derived from the gateway Secret as dualca derives its default. They need
// no Secret, so they take no flag naming one but that.

// Control is the command line of `dualca pause`, `dualca resume` and
// `dualca promote`: the status ConfigMap whose annotation they set.
type Control struct {
	// StatusConfigMap is where dualca publishes its status and takes the
	// operator's controls from.
	StatusConfigMap types.NamespacedName
}

// Status is the command line of `dualca status`.
type Status struct {
	// StatusConfigMap is the ConfigMap whose published status is shown.
	StatusConfigMap types.NamespacedName
	// StalledAfter is how long a rotation may stay in Renewing before the
	// report calls the renewal stalled.
	StalledAfter time.Duration
	// Output is text or json.
	Output string
}

// target is the status ConfigMap as the command line names it.
type target struct {
	statusConfigMap, gatewaySecret string
}

func (t *target) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&t.statusConfigMap, "status-configmap", "",
		"The status ConfigMap dualca publishes to, as NAMESPACE/NAME: dualca's --status-configmap (the chart's NOTES name it). Or give --gateway-secret.")
	fs.StringVar(&t.gatewaySecret, "gateway-secret", "",
		"The gateway Secret, as NAMESPACE/NAME, when dualca runs with the default status ConfigMap (GATEWAY_NAMESPACE/GATEWAY_NAME-dualca-status). Only its name is used: the Secret is not read.")
}

// key is the status ConfigMap: --status-configmap, or the default of
// --gateway-secret. Exactly one must be given.
func (t *target) key() (types.NamespacedName, error) {
	switch {
	case t.statusConfigMap != "" && t.gatewaySecret != "":
		return types.NamespacedName{}, errors.New("give --status-configmap or --gateway-secret, not both")
	case t.statusConfigMap != "":
		return ParseKey("status-configmap", t.statusConfigMap)
	case t.gatewaySecret != "":
		gw, err := ParseKey("gateway-secret", t.gatewaySecret)
		if err != nil {
			return gw, err
		}
		key := DefaultStatusConfigMap(gw, DefaultStateSecret(gw))
		if _, err := ParseKey("status-configmap", key.String()); err != nil {
			return types.NamespacedName{}, fmt.Errorf("%w (derived from --gateway-secret: give --status-configmap)", err)
		}
		return key, nil
	}
	return types.NamespacedName{}, errors.New("--status-configmap is required, as NAMESPACE/NAME (or --gateway-secret, for dualca's default)")
}

// removed registers flags the command no longer takes, each failing with
// why, and returns them so that the usage leaves them out.
func removed(fs *flag.FlagSet, why string, names ...string) map[string]bool {
	out := map[string]bool{}
	for _, name := range names {
		out[name] = true
		fs.Func(name, "", func(string) error {
			return fmt.Errorf("--%s is no longer needed: %s", name, why)
		})
	}
	return out
}

// usage prints the usage line, help and the flags of fs but the removed ones.
func usage(fs *flag.FlagSet, line, help string, gone map[string]bool) func() {
	return func() {
		_, _ = fmt.Fprintf(fs.Output(), "Usage: %s\n\n%s\n\nFlags:\n", line, help)
		live := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		live.SetOutput(fs.Output())
		fs.VisitAll(func(f *flag.Flag) {
			if !gone[f.Name] {
				live.Var(f.Value, f.Name, f.Usage)
			}
		})
		live.PrintDefaults()
	}
}

// UsageError is a command line a command cannot run, or a request for
// its help (wrapping flag.ErrHelp): what is wrong, and the command's
// usage, for the command to print after it. The flag package itself
// prints nothing: one message, then the usage.
type UsageError struct {
	Err   error
	Usage string
}

func (e *UsageError) Error() string { return e.Err.Error() }

func (e *UsageError) Unwrap() error { return e.Err }

// newFlagSet is a FlagSet that prints nothing of its own: its errors and
// usage reach the command through a UsageError.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// withUsage is err, if any, with the usage fs.Usage prints.
func withUsage(fs *flag.FlagSet, err error) error {
	if err == nil {
		return nil
	}
	var b strings.Builder
	fs.SetOutput(&b)
	fs.Usage()
	fs.SetOutput(io.Discard)
	return &UsageError{Err: err, Usage: b.String()}
}

// ParseControl parses the flags of an operator control command. It never
// touches the cluster. Its errors are *UsageError.
func ParseControl(name, help string, args []string) (Control, error) {
	var c Control
	var t target
	fs := newFlagSet(name)
	fs.Usage = usage(fs, name+" --status-configmap=NAMESPACE/NAME", help, nil)
	t.addFlags(fs)
	config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, withUsage(fs, err)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	key, err := t.key()
	c.StatusConfigMap = key
	return c, withUsage(fs, errors.Join(append(errs, err)...))
}

// statusHelp is what `dualca status --help` says.
const statusHelp = `Shows the status dualca publishes in its status ConfigMap: the roots in the gateway's bundle,
the phase, client renewals, what comes next and when, and how old the status is. Reads that
one ConfigMap and no Secret: the operator Role is all it needs. Exits 0 when all is well,
1 when something needs attention (among them a status dualca should have replaced more than
three poll intervals ago, by what it says comes next, or none), 2 on bad flags or when the
ConfigMap cannot be read.`

// ParseStatus parses the flags of `dualca status`. It never touches the
// cluster.
func ParseStatus(name string, args []string) (Status, error) {
	s := Status{StalledAfter: time.Hour, Output: "text"}
	var t target
	fs := newFlagSet(name)
	gone := removed(fs, "dualca status reads only the status ConfigMap dualca publishes (--status-configmap, or --gateway-secret for the default), never a Secret",
		"root-secret", "client-selector", "client-namespaces")
	fs.Usage = usage(fs, name+" --status-configmap=NAMESPACE/NAME [-o json]", statusHelp, gone)
	t.addFlags(fs)
	fs.DurationVar(&s.StalledAfter, "stalled-after", s.StalledAfter, "A rotation renewing clients for longer than this is reported as stalled.")
	fs.StringVar(&s.Output, "o", s.Output, "Output: text or json.")
	config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return s, withUsage(fs, err)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	key, err := t.key()
	s.StatusConfigMap = key
	errs = append(errs, err, s.Validate())
	return s, withUsage(fs, errors.Join(errs...))
}

// Validate checks the options of `dualca status` other than the ConfigMap
// and names the flag at fault.
func (s *Status) Validate() error {
	var errs []error
	if s.Output != "text" && s.Output != "json" {
		errs = append(errs, fmt.Errorf("-o=%q: want text or json", s.Output))
	}
	if s.StalledAfter <= 0 {
		errs = append(errs, fmt.Errorf("--stalled-after must be positive, got %s", s.StalledAfter))
	}
	return errors.Join(errs...)
}
