package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/run"
)

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// OCI media types the checks expect.
const (
	indexType    = "application/vnd.oci.image.index.v1+json"
	manifestType = "application/vnd.oci.image.manifest.v1+json"
	configType   = "application/vnd.oci.image.config.v1+json"
	layerType    = "application/vnd.oci.image.layer.v1.tar+gzip"
	spdxType     = "application/spdx+json"
)

// The parts of the OCI image spec the checks read. Written here rather
// than imported, so that the client checking the registry shares no code
// with go-containerregistry, which pushed.
type (
	descriptor struct {
		MediaType    string            `json:"mediaType"`
		ArtifactType string            `json:"artifactType,omitempty"`
		Digest       string            `json:"digest"`
		Size         int64             `json:"size"`
		Platform     *platform         `json:"platform,omitempty"`
		Annotations  map[string]string `json:"annotations,omitempty"`
	}
	platform struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant,omitempty"`
	}
	manifest struct {
		MediaType    string            `json:"mediaType"`
		ArtifactType string            `json:"artifactType,omitempty"`
		Config       descriptor        `json:"config"`
		Layers       []descriptor      `json:"layers"`
		Manifests    []descriptor      `json:"manifests"`
		Subject      *descriptor       `json:"subject,omitempty"`
		Annotations  map[string]string `json:"annotations,omitempty"`
	}
	imageConfig struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant,omitempty"`
		Created      string `json:"created"`
		Config       struct {
			User       string            `json:"User"`
			Entrypoint []string          `json:"Entrypoint"`
			Cmd        []string          `json:"Cmd"`
			Env        []string          `json:"Env"`
			WorkingDir string            `json:"WorkingDir"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
)

// registry is a running distribution registry.
type registry struct {
	addr string // host:port on 127.0.0.1
	log  *run.Buffer
}

var sharedRegistry struct {
	once sync.Once
	r    *registry
}

// theRegistry starts bin/registry on a free loopback port, once per test
// run, and waits until it serves the distribution API.
func theRegistry(t *testing.T) *registry {
	t.Helper()
	sharedRegistry.once.Do(func() { sharedRegistry.r = startRegistry(t) })
	if sharedRegistry.r == nil {
		t.Fatal("the registry did not start (see the first test that asked for it)")
	}
	return sharedRegistry.r
}

func startRegistry(t *testing.T) *registry {
	g := NewWithT(t)
	addr, err := controlplane.FreeAddress()
	g.Expect(err).NotTo(HaveOccurred())
	dir, err := os.MkdirTemp("", "dualca-registry-")
	g.Expect(err).NotTo(HaveOccurred())
	config := fmt.Sprintf(`version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: %s}, delete: {enabled: true}}
http: {addr: %q}
`, filepath.Join(dir, "data"), addr)
	g.Expect(os.WriteFile(filepath.Join(dir, "config.yml"), []byte(config), 0o600)).To(Succeed())
	r := &registry{addr: addr, log: &run.Buffer{}}
	cmd := exec.Command(tool(t, "registry"), "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = r.log, r.log
	g.Expect(cmd.Start()).To(Succeed())
	atShutdown(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	})
	g.Eventually(func() (int, error) {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}, time.Minute, 100*time.Millisecond).Should(Equal(http.StatusOK), "the registry serves /v2/")
	return r
}

// get fetches /v2/dualca/{kind}/{ref} with accept as the Accept header and
// checks that what came back has the digest it was asked for (when ref is
// one).
func (r *registry) get(ctx context.Context, kind, ref, accept string) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/v2/dualca/"+kind+"/"+ref, nil)
	if err != nil {
		return nil, "", err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET %s %s: %s: %s", kind, ref, resp.Status, body)
	}
	if digestRE.MatchString(ref) {
		sum := sha256.Sum256(body)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != ref {
			return nil, "", fmt.Errorf("GET %s %s: the content's digest is %s", kind, ref, got)
		}
	}
	return body, resp.Header.Get("Content-Type"), nil
}

// getJSON is get for a JSON document, decoded into into; the raw document
// is returned too, for error messages.
func (r *registry) getJSON(ctx context.Context, kind, ref, accept string, into any) ([]byte, error) {
	raw, _, err := r.get(ctx, kind, ref, accept)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return nil, fmt.Errorf("GET %s %s: %w", kind, ref, err)
	}
	return raw, nil
}

// pulled is an image index pulled from the registry by digest, with every
// document and blob it references.
type pulled struct {
	index     manifest
	manifests map[string]manifest    // by platform "os/arch"
	configs   map[string]imageConfig // by platform
	layers    map[string][][]byte    // compressed, by platform
	sboms     map[string][]byte      // the SPDX document referring to each platform's image
	digests   map[string]string      // the manifest digest of each platform
}

// pull fetches the index at digest and everything it references, and the
// SBOM artifacts that refer to each image. The registry has no referrers
// API (distribution v3.1 does not serve it), so the SBOMs are found the way
// the OCI distribution spec says clients must then: through the index
// tagged sha256-<hex of the subject's digest>, which the pusher maintains.
func (r *registry) pull(ctx context.Context, digest string) (*pulled, error) {
	raw, ct, err := r.get(ctx, "manifests", digest, indexType)
	if err != nil {
		return nil, err
	}
	p := &pulled{manifests: map[string]manifest{}, configs: map[string]imageConfig{},
		layers: map[string][][]byte{}, sboms: map[string][]byte{}, digests: map[string]string{}}
	if ct != indexType {
		return nil, fmt.Errorf("the index is served as %q", ct)
	}
	if err := json.Unmarshal(raw, &p.index); err != nil {
		return nil, err
	}
	for _, d := range p.index.Manifests {
		if d.Platform == nil {
			return nil, fmt.Errorf("manifest %s of the index has no platform", d.Digest)
		}
		plat := d.Platform.OS + "/" + d.Platform.Architecture
		p.digests[plat] = d.Digest
		if err := r.pullImage(ctx, p, plat, d); err != nil {
			return nil, err
		}
		if p.sboms[plat], err = r.pullSBOM(ctx, d.Digest); err != nil {
			return nil, fmt.Errorf("the SBOM of %s: %w", plat, err)
		}
	}
	return p, nil
}

func (r *registry) pullImage(ctx context.Context, p *pulled, plat string, d descriptor) error {
	var m manifest
	if _, err := r.getJSON(ctx, "manifests", d.Digest, d.MediaType, &m); err != nil {
		return err
	}
	p.manifests[plat] = m
	var cfg imageConfig
	if _, err := r.getJSON(ctx, "blobs", m.Config.Digest, "", &cfg); err != nil {
		return err
	}
	p.configs[plat] = cfg
	for _, l := range m.Layers {
		blob, _, err := r.get(ctx, "blobs", l.Digest, "")
		if err != nil {
			return err
		}
		p.layers[plat] = append(p.layers[plat], blob)
	}
	return nil
}

func (r *registry) pullSBOM(ctx context.Context, subject string) ([]byte, error) {
	var referrers manifest
	raw, err := r.getJSON(ctx, "manifests", strings.Replace(subject, ":", "-", 1), indexType, &referrers)
	if err != nil {
		return nil, err
	}
	var found []descriptor
	for _, d := range referrers.Manifests {
		if d.ArtifactType == spdxType {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d SPDX referrers, want 1: %s", len(found), raw)
	}
	var m manifest
	if raw, err = r.getJSON(ctx, "manifests", found[0].Digest, manifestType, &m); err != nil {
		return nil, err
	}
	if m.Subject == nil || m.Subject.Digest != subject || len(m.Layers) != 1 || m.Layers[0].MediaType != spdxType {
		return nil, fmt.Errorf("the SBOM manifest is not one SPDX layer about %s: %s", subject, raw)
	}
	blob, _, err := r.get(ctx, "blobs", m.Layers[0].Digest, "")
	return blob, err
}

// pushed is the shared build, pushed once to the shared registry by
// ocibuild push (what `make push` runs) and pulled back by its digest.
var sharedPush struct {
	once sync.Once
	p    *pulled
}

func pushedImage(t *testing.T) (*registry, build, *pulled) {
	t.Helper()
	b := sharedBuild(t)
	r := theRegistry(t)
	sharedPush.once.Do(func() {
		g := NewWithT(t)
		out, err := exec.Command(tool(t, "ocibuild"), "push", "-layout", filepath.Join(b.dir, "oci"),
			"-ref", r.addr+"/dualca:"+chartField(t, "appVersion")).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "ocibuild push: %s", out)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		g.Expect(lines[len(lines)-1]).To(Equal(r.addr+"/dualca@"+b.digest), "push prints the reference by digest last")
		t.Logf("ocibuild push:\n%s", out)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sharedPush.p, err = r.pull(ctx, b.digest)
		g.Expect(err).NotTo(HaveOccurred(), "pulling %s by digest", b.digest)
	})
	if sharedPush.p == nil {
		t.Fatal("pushing or pulling the image failed (see the first test that asked for it)")
	}
	return r, b, sharedPush.p
}
