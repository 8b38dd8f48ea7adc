package flags

import (
	"errors"
	"flag"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
)

// Control is the command line of `dualca pause`, `dualca resume` and
// `dualca promote`: the gateway Secret whose annotation they set.
type Control struct {
	// GatewaySecret is the Secret dualca owns and the gateway reads.
	GatewaySecret types.NamespacedName
}

// ParseControl parses the flags of an operator control command. It never
// touches the cluster.
func ParseControl(name, help string, args []string) (Control, error) {
	var c Control
	var gateway string
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		_, _ = fmt.Fprintf(fs.Output(), "Usage: %s --gateway-secret=NAMESPACE/NAME\n\n%s\n\nFlags:\n", name, help)
		fs.PrintDefaults()
	}
	fs.StringVar(&gateway, "gateway-secret", "", "The gateway Secret, as NAMESPACE/NAME. Required.")
	config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	key, err := ParseKey("gateway-secret", gateway)
	c.GatewaySecret = key
	return c, errors.Join(append(errs, err)...)
}
