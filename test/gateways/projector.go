package gateways

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	informerscorev1 "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/dualca/dualca/test/lib/mtls"
)

// Kind is the kind of object a projected file comes from.
type Kind string

// The kinds a projected volume can read.
const (
	KindSecret    Kind = "Secret"
	KindConfigMap Kind = "ConfigMap"
)

// Item is one file of a projected volume: key Key of the object Kind/Name
// (in the projector's namespace) written as Path, as the items of a
// projected volume's secret or configMap source say.
type Item struct {
	Kind Kind
	Name string
	Key  string
	Path string
}

// object is a source object of a projection: what is watched.
type object struct {
	kind Kind
	name string
}

// Projector is what the kubelet does for a projected volume: it watches
// the objects its items come from and, a lag after each change, writes the
// volume anew the way kubelet's atomic writer does (every file into a fresh
// timestamped directory, then the `..data` symlink swapped to it by a
// rename; each file a symlink through `..data`), so a reader sees either
// the whole old version or the whole new one. Then it calls Written, which
// a gateway uses to reload: a reload refused is Written's error, counted.
type Projector struct {
	kube      kubernetes.Interface
	namespace string
	items     []Item
	dir       string
	// Written is called, in the projector's goroutine, after each version
	// is in place; nil for none.
	Written func() error

	// versions are the volume's contents waiting for their moment.
	versions *mtls.LagQueue[map[string][]byte]

	mu       sync.Mutex
	data     map[object]map[string][]byte
	lastSeen map[string][]byte
	stats    ProjectorStats
}

// ProjectorStats counts what a projector did.
type ProjectorStats struct {
	// Writes is how many versions were written.
	Writes int
	// Refused is how many calls of Written failed; LastRefusal says why.
	Refused     int
	LastRefusal string
}

// NewProjector projects items of namespace into dir, each version lag()
// after the change that made it (a nil lag: at once).
func NewProjector(kube kubernetes.Interface, namespace string, items []Item, dir string, lag func() time.Duration) *Projector {
	if lag == nil {
		lag = func() time.Duration { return 0 }
	}
	return &Projector{kube: kube, namespace: namespace, items: items, dir: dir,
		versions: mtls.NewLagQueue[map[string][]byte](lag), data: map[object]map[string][]byte{}}
}

// Dir is where the volume is.
func (p *Projector) Dir() string { return p.dir }

// Path is the path of the projected file path.
func (p *Projector) Path(path string) string { return filepath.Join(p.dir, path) }

// Stats is a snapshot of the projector's counts.
func (p *Projector) Stats() ProjectorStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Start watches the sources and writes versions until ctx ends. It returns
// at once; Wait waits for the volume's first version.
func (p *Projector) Start(ctx context.Context) error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	seen := map[object]bool{}
	for _, it := range p.items {
		o := object{it.Kind, it.Name}
		if seen[o] {
			continue
		}
		seen[o] = true
		inf, err := p.informer(o)
		if err != nil {
			return err
		}
		go inf.RunWithContext(ctx)
	}
	go p.versions.Run(ctx, p.write)
	return nil
}

// informer watches the one object o, by a field selector on its name.
func (p *Projector) informer(o object) (cache.SharedIndexInformer, error) {
	byName := func(opts *metav1.ListOptions) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.name).String()
	}
	var inf cache.SharedIndexInformer
	var dataOf func(any) map[string][]byte
	switch o.kind {
	case KindSecret:
		inf = informerscorev1.NewFilteredSecretInformer(p.kube, p.namespace, 0, nil, byName)
		dataOf = func(obj any) map[string][]byte { return obj.(*corev1.Secret).Data }
	case KindConfigMap:
		inf = informerscorev1.NewFilteredConfigMapInformer(p.kube, p.namespace, 0, nil, byName)
		dataOf = func(obj any) map[string][]byte {
			out := map[string][]byte{}
			for k, v := range obj.(*corev1.ConfigMap).Data {
				out[k] = []byte(v)
			}
			maps.Copy(out, obj.(*corev1.ConfigMap).BinaryData)
			return out
		}
	default:
		return nil, fmt.Errorf("cannot project a %s", o.kind)
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.changed(o, dataOf(obj)) },
		UpdateFunc: func(_, obj any) { p.changed(o, dataOf(obj)) },
		// A deleted source leaves the volume as it was, as the kubelet does.
	})
	return inf, err
}

// changed records the new data of o and, when every item can be read and
// the volume would differ from the last version queued, queues a version
// due lag() from now, never before the version queued before it.
func (p *Projector) changed(o object, data map[string][]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.data[o] = data
	files := map[string][]byte{}
	for _, it := range p.items {
		v, ok := p.data[object{it.Kind, it.Name}][it.Key]
		if !ok {
			return // a missing key: the kubelet keeps the volume as it is
		}
		files[it.Path] = v
	}
	if p.lastSeen != nil && maps.EqualFunc(files, p.lastSeen, func(a, b []byte) bool { return string(a) == string(b) }) {
		return
	}
	p.lastSeen = files
	p.versions.Push(files)
}

// write puts one version in place and tells Written.
func (p *Projector) write(files map[string][]byte) {
	err := writeAtomically(p.dir, files)
	p.mu.Lock()
	p.stats.Writes++
	p.mu.Unlock()
	if err == nil && p.Written != nil {
		err = p.Written()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.stats.Refused++
		p.stats.LastRefusal = err.Error()
	}
}

// Wait waits until the volume holds a first version, for at most timeout.
func (p *Projector) Wait(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for p.Stats().Writes == 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no version of %v projected into %s: %w", p.items, p.dir, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// dataLink is the symlink the atomic writer swaps.
const dataLink = "..data"

// writeAtomically is kubelet's atomic writer in short: the files go into a
// new directory ..<timestamp>, a symlink ..data_tmp to it is renamed over
// ..data (one rename: readers see one version or the other), each file's
// own symlink through ..data is made the first time, and the directory of
// the previous version is removed.
func writeAtomically(dir string, files map[string][]byte) error {
	tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	for path, content := range files {
		if err := os.WriteFile(filepath.Join(tsDir, path), content, 0o600); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	tmp := filepath.Join(dir, dataLink+"_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(tsDir), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return err
	}
	for path := range files {
		link := filepath.Join(dir, path)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join(dataLink, path), link); err != nil {
				return err
			}
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
