package mtls

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	informerscorev1 "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Secrets delivers the versions of named Secrets in one namespace. The
// Gateway and Client read their credential only through it.
type Secrets interface {
	// Watch calls update with the Secret called name when it is first listed
	// and each time it changes, and with nil when it is deleted; one call at
	// a time, until ctx is done. The Secret is shared with a cache and must
	// not be modified. The returned wait blocks until the watch has stopped
	// calling update (after ctx is done).
	Watch(ctx context.Context, name string, update func(*corev1.Secret)) (wait func())
}

// OneObjectWatches returns Secrets that open a watch of their own for each
// Watch call, restricted to that one Secret by a metadata.name field
// selector, the way an SDS agent watches just the credential it serves.
func OneObjectWatches(cs kubernetes.Interface, namespace string) Secrets {
	return oneObject{cs: cs, namespace: namespace}
}

type oneObject struct {
	cs        kubernetes.Interface
	namespace string
}

func (o oneObject) Watch(ctx context.Context, name string, update func(*corev1.Secret)) func() {
	inf := informerscorev1.NewTypedFilteredSecretInformer(o.cs, o.namespace, 0, nil, func(opts *metav1.ListOptions) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
	// An informer that has not been started accepts every handler.
	_, _ = inf.AddTypedEventHandler(handlerFor(name, update))
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	return func() { <-done }
}

// SharedWatch is one watch on all the Secrets of a namespace, shared by any
// number of gateways and clients there: a fleet of 50 agents then costs the
// API server one watch instead of 50. It is a Secrets once started.
type SharedWatch struct {
	inf  informerscorev1.SecretIndexInformer
	done chan struct{}
}

// NewSharedWatch returns a watch on the Secrets of namespace; Start runs it.
func NewSharedWatch(cs kubernetes.Interface, namespace string) *SharedWatch {
	return &SharedWatch{
		inf:  informerscorev1.NewTypedSecretInformer(cs, namespace, 0, nil),
		done: make(chan struct{}),
	}
}

// Start runs the watch until ctx is done. Watch may be called before or
// after.
func (w *SharedWatch) Start(ctx context.Context) {
	go func() {
		defer close(w.done)
		w.inf.RunWithContext(ctx)
	}()
}

// Wait blocks until the watch started by Start has stopped.
func (w *SharedWatch) Wait() { <-w.done }

// Watch implements Secrets: it adds a handler for name to the shared watch
// and removes it when ctx is done. A handler added late is first told about
// the Secret as it is now, like a new watch would be.
func (w *SharedWatch) Watch(ctx context.Context, name string, update func(*corev1.Secret)) func() {
	reg, err := w.inf.AddTypedEventHandler(handlerFor(name, update))
	if err != nil {
		// The shared watch has stopped already: nothing will be delivered.
		return func() {}
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-w.done:
		}
		// Waits until the handler's goroutines have ended, so that wait
		// means update will not be called again.
		_ = cache.ShutDownEventHandler(w.inf, reg)
	}()
	return func() { <-stopped }
}

// handlerFor passes the versions of the Secret called name to update. Relists
// deliver unchanged versions too; update sorts them out by resourceVersion.
func handlerFor(name string, update func(*corev1.Secret)) cache.TypedResourceEventHandler[*corev1.Secret] {
	return cache.TypedResourceEventHandlerFuncs[*corev1.Secret]{
		AddFunc: func(s *corev1.Secret) {
			if s.Name == name {
				update(s)
			}
		},
		UpdateFunc: func(_, s *corev1.Secret) {
			if s.Name == name {
				update(s)
			}
		},
		DeleteFunc: func(d cache.DeletedObject[*corev1.Secret]) {
			if d.GetName() == name {
				update(nil)
			}
		},
	}
}
