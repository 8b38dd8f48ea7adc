package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer/operator"
)

// controlHelp says what each operator control does, for its --help.
var controlHelp = map[string]string{
	"pause": "Holds the rotation: dualca keeps trusting new roots, but renews no client and does not switch the server\n" +
		"(unless its root is about to expire) until dualca resume. Sets " + bundle.AnnotationPaused + "=" + bundle.PausedTrue + " on the status ConfigMap;\n" +
		"needs only the operator Role (get and patch of that ConfigMap).",
	"resume": "Lets a paused rotation go on. Removes " + bundle.AnnotationPaused + " from the status ConfigMap.",
	"promote": "Switches the server to the current root now, even with clients pending (a ServerSwitchForced Warning).\n" +
		"One-shot: sets " + bundle.AnnotationPromote + " on the status ConfigMap to the current root's fingerprint prefix, as dualca\n" +
		"published it, at the ConfigMap's version read; dualca removes it when it switches.",
}

// control runs `dualca pause`, `dualca resume` or `dualca promote`: one
// patch of the status ConfigMap's annotations. Exit 0 when done, 2 on bad
// flags or a failed patch, 1 when there is nothing to promote.
func control(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	fail := func(code int, msg ...any) int {
		_, _ = fmt.Fprintln(stderr, append([]any{"dualca " + cmd + ":"}, msg...)...)
		return code
	}
	f, err := flags.ParseControl("dualca "+cmd, controlHelp[cmd], args)
	if code, done := parsed("dualca "+cmd, err, 0, 2, stdout, stderr); done {
		return code
	}
	c, err := controlClient()
	if err != nil {
		return fail(2, err)
	}
	key := f.StatusConfigMap
	switch cmd {
	case "promote":
		prefix, err := operator.Promote(ctx, c.CoreV1(), key)
		if errors.Is(err, operator.ErrNothingToPromote) {
			return fail(1, err)
		}
		if err != nil {
			return fail(2, err)
		}
		_, _ = fmt.Fprintf(stdout, "status configmap %s: promote to root %s requested; dualca switches the server at once, or when the gateway has had the propagation delay to load the root (dualca status says when), with a ServerSwitchForced Warning\n", key, prefix)
	default:
		if _, err := operator.Pause(ctx, c.CoreV1(), key, cmd == "pause"); err != nil {
			return fail(2, err)
		}
		what := "resumed: dualca renews clients and switches the server as the rotation requires"
		if cmd == "pause" {
			what = "paused: dualca renews no client and switches the server only if its root is about to expire, until dualca resume"
		}
		_, _ = fmt.Fprintf(stdout, "status configmap %s: %s\n", key, what)
	}
	return 0
}

// controlClient is a client of the cluster the kubeconfig names. A typed
// client: one get or patch needs no discovery of the API server's resources.
func controlClient() (kubernetes.Interface, error) {
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	c, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("building a client: %w", err)
	}
	return c, nil
}
