package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
)

// copierCommand makes the benchmark binary the floor of the comparison: a
// trivial copier that watches the root Secret, and at each event GETs it
// and PUTs its tls.crt, tls.key and ca.crt into the target Secret. No
// cache, no validation, no rate limit: what carrying a change costs the API
// server and its watches, and nothing else.
//
// The roots' floor runs it with --from-event (the event's Secret is
// written, no GET: dualca reads the root from its cache) and --pad-to (a
// "padding" key fills the target's data to the gateway Secret's size).
const copierCommand = "copier"

// paddingKey is the target's key that --pad-to fills.
const paddingKey = "padding"

func runCopier(args []string) error {
	fs := flag.NewFlagSet(copierCommand, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	namespace := fs.String("namespace", "", "namespace of both Secrets")
	root := fs.String("root", rootName, "the Secret copied")
	target := fs.String("target", copierTarget, "the Secret written")
	fromEvent := fs.Bool("from-event", false, "write the Secret the watch event carries instead of reading it again")
	padTo := fs.Int("pad-to", 0, "fill the target's data to this many bytes with a key "+paddingKey)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1 // no client-side rate limit: the floor
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	secrets := cs.CoreV1().Secrets(*namespace)
	sel := fields.OneTermEqualSelector("metadata.name", *root).String()
	list, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return fmt.Errorf("listing the root: %w", err)
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = sel
		return secrets.Watch(ctx, o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
	if err != nil {
		return err
	}
	defer rw.Stop()
	c := &copier{cs: cs, namespace: *namespace, root: *root, target: *target, padTo: *padTo}
	if len(list.Items) > 0 {
		c.copy(ctx, nil)
	}
	fmt.Println("ready")
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-rw.ResultChan():
			if !ok {
				return errors.New("the root's watch ended")
			}
			if e.Type != watch.Added && e.Type != watch.Modified {
				continue
			}
			var from *corev1.Secret
			if *fromEvent {
				from, _ = e.Object.(*corev1.Secret)
			}
			c.copy(ctx, from)
		}
	}
}

type copier struct {
	cs                      kubernetes.Interface
	namespace, root, target string
	padTo                   int
}

// copy writes the target from root, read first when nil; a failure is
// printed and the next event tries again.
func (c *copier) copy(ctx context.Context, root *corev1.Secret) {
	secrets := c.cs.CoreV1().Secrets(c.namespace)
	if root == nil {
		var err error
		if root, err = secrets.Get(ctx, c.root, metav1.GetOptions{}); err != nil {
			fmt.Fprintln(os.Stderr, "reading the root:", err)
			return
		}
	}
	t := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.target, Namespace: c.namespace}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: root.Data[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: root.Data[corev1.TLSPrivateKeyKey], "ca.crt": root.Data["ca.crt"]}}
	if pad := c.padTo - dataBytes(t.Data); pad > 0 {
		t.Data[paddingKey] = make([]byte, pad)
	}
	_, err := secrets.Update(ctx, t, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = secrets.Create(ctx, t, metav1.CreateOptions{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "writing the target:", err)
	}
}

// dataBytes is the size of a Secret's data, its values' bytes.
func dataBytes(data map[string][]byte) int {
	n := 0
	for _, v := range data {
		n += len(v)
	}
	return n
}
