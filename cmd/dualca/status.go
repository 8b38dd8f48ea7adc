package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
)

// Exit codes of `dualca status`: it works as a check.
const (
	statusOK        = 0
	statusAttention = 1 // something needs an operator: invalid root, failed or stalled renewal, gateway behind
	statusError     = 2 // bad flags, or the cluster could not be read
)

// status runs `dualca status`: flags first, then reads, then prints.
func status(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// fail reports why the command could not do its job. If stderr cannot
	// be written either, the exit code is all that is left to say it.
	fail := func(msg ...any) int {
		_, _ = fmt.Fprintln(stderr, append([]any{"dualca status:"}, msg...)...)
		return statusError
	}
	o, output, err := parseStatusFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return statusOK
	}
	if err != nil {
		return fail("invalid flags:", err)
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fail("loading kubeconfig:", err)
	}
	scheme, err := syncer.Scheme()
	if err != nil {
		return fail(err)
	}
	c, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return fail(err)
	}
	report, err := syncer.Status(ctx, c, o, time.Now())
	if err != nil {
		return fail(err)
	}
	if output == "json" {
		err = report.WriteJSON(stdout)
	} else {
		err = report.WriteText(stdout)
	}
	if err != nil {
		return fail(err)
	}
	if len(report.Attention) > 0 {
		return statusAttention
	}
	return statusOK
}

// parseStatusFlags reads the flags of `dualca status`; nothing touches the
// cluster before they are all valid.
func parseStatusFlags(args []string) (syncer.StatusOptions, string, error) {
	fs := flag.NewFlagSet("dualca status", flag.ContinueOnError)
	gateway := fs.String("gateway-secret", "", "The gateway Secret, as NAMESPACE/NAME. Required.")
	root := fs.String("root-secret", "", "The root CA Secret, as NAMESPACE/NAME: validated too when given.")
	selector := fs.String("client-selector", "", "Label selector of the client Certificates: counts the clients that need each root.")
	namespaces := fs.String("client-namespaces", "", "Comma-separated namespaces of the client Certificates (default: the gateway's).")
	stalled := fs.Duration("stalled-after", time.Hour, "A rotation renewing clients for longer than this is reported as stalled.")
	output := fs.String("o", "text", "Output: text or json.")
	config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return syncer.StatusOptions{}, "", err
	}
	var errs []error
	o := syncer.StatusOptions{StalledAfter: *stalled}
	var err error
	if o.GatewaySecret, err = namespacedName("gateway-secret", *gateway, true); err != nil {
		errs = append(errs, err)
	}
	if o.RootSecret, err = namespacedName("root-secret", *root, false); err != nil {
		errs = append(errs, err)
	}
	if *selector != "" {
		if o.ClientSelector, err = labels.Parse(*selector); err != nil {
			errs = append(errs, fmt.Errorf("--client-selector: %w", err))
		}
		o.ClientNamespaces = []string{o.GatewaySecret.Namespace}
		if *namespaces != "" {
			o.ClientNamespaces = strings.Split(*namespaces, ",")
		}
	}
	if *output != "text" && *output != "json" {
		errs = append(errs, fmt.Errorf("-o=%q: want text or json", *output))
	}
	if *stalled <= 0 {
		errs = append(errs, fmt.Errorf("--stalled-after must be positive, got %s", *stalled))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	return o, *output, errors.Join(errs...)
}

func namespacedName(name, v string, required bool) (types.NamespacedName, error) {
	if v == "" && !required {
		return types.NamespacedName{}, nil
	}
	return flags.ParseKey(name, v)
}
