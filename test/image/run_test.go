package image

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/run"
)

// kubeconfigDir is where the container finds its kubeconfig: the one
// thing a cluster would mount (the ServiceAccount token) besides the image.
const kubeconfigDir = "/var/run/dualca"

// runImage unpacks the pulled image for this machine's architecture and
// runs its entrypoint with runc, as the Deployment d would run it, then
// checks that it syncs the gateway Secret from root and serves /readyz and
// /metrics.
func runImage(t *testing.T, cl *cluster, p *pulled, d *appsv1.Deployment, root *certs.CA) {
	g := NewWithT(t)
	plat := "linux/" + runtime.GOARCH
	cfg, ok := p.configs[plat]
	g.Expect(ok).To(BeTrue(), "the index has an image for %s", plat)
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	g.Expect(os.Mkdir(rootfs, 0o755)).To(Succeed()) //nolint:gosec // G301: / must be readable by the container's user, as in any image
	for _, layer := range p.layers[plat] {
		for name, f := range layerFiles(g, layer) {
			g.Expect(os.WriteFile(filepath.Join(rootfs, name), f.content, os.FileMode(f.hdr.Mode&0o777))).To(Succeed()) //nolint:gosec // G115: masked to the permission bits, which fit
		}
	}
	// The kubeconfig, readable by the container's user only.
	kdir := filepath.Join(bundle, "kube")
	g.Expect(os.Mkdir(kdir, 0o700)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(kdir, "kubeconfig"), serviceAccountKubeconfig(t, cl), 0o600)).To(Succeed())
	for _, f := range []string{kdir, filepath.Join(kdir, "kubeconfig")} {
		g.Expect(os.Chown(f, 65532, 65532)).To(Succeed())
	}

	metricsAddr, err := controlplane.FreeAddress()
	g.Expect(err).NotTo(HaveOccurred())
	healthAddr, err := controlplane.FreeAddress()
	g.Expect(err).NotTo(HaveOccurred())
	args := append(append([]string{}, cfg.Config.Entrypoint...), containerArgs(d, metricsAddr, healthAddr)...)
	writeRuncConfig(t, bundle, cfg, args, kdir)

	c := startContainer(t, bundle)
	t.Logf("runc runs %s as %s with a read-only root: %q", p.digests[plat], cfg.Config.User, args)
	g.Eventually(func() (int, error) { return httpGet("http://" + healthAddr + "/readyz") }, time.Minute, 100*time.Millisecond).
		Should(Equal(http.StatusOK), "the container is ready: it brought the gateway in sync\n%s", c.log)

	gw := &corev1.Secret{}
	g.Expect(cl.c.Get(context.Background(), gatewayKey, gw)).To(Succeed(), "the container wrote the gateway Secret")
	g.Expect(bytes.Contains(gw.Data["ca.crt"], root.CertPEM)).To(BeTrue(), "the gateway trusts the root")
	g.Expect(signedBy(gw.Data["tls.crt"], root)).To(Succeed(), "the gateway presents a credential from the root")
	t.Logf("the container wrote the gateway Secret %s (keys %v)", gatewayKey, keys(gw.Data))

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(err).NotTo(HaveOccurred())
	buildInfo := fmt.Sprintf(`dualca_build_info{goversion="%s",revision="%s",version="%s"} 1`,
		runtime.Version(), testRevision, cfg.Config.Labels["org.opencontainers.image.version"])
	g.Expect(string(body)).To(ContainSubstring(buildInfo))
	t.Logf("/metrics serves %s", buildInfo)

	pid := c.pid(t)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(status)).To(MatchRegexp(`(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`), "dualca runs as 65532")
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(mounts)).To(MatchRegexp(`(?m)^\S+ \S+ \S+ \S+ / ro[,\s]`), "its root filesystem is read-only")
	version := c.exec(t, cfg.Config.User, "/dualca", "version")
	g.Expect(version).To(Equal(fmt.Sprintf("dualca %s (commit %s, %s)\n", cfg.Config.Labels["org.opencontainers.image.version"], testRevision, runtime.Version())))
	t.Logf("dualca version in the container: %s", strings.TrimSpace(version))
}

// containerArgs are the Deployment's arguments, with the endpoints on free
// loopback ports (the container shares the host's network, where the
// chart's :8080 and :8081 would listen on every interface) and the
// kubeconfig a pod would not need.
func containerArgs(d *appsv1.Deployment, metricsAddr, healthAddr string) []string {
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=" + metricsAddr
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=" + healthAddr
		}
		args = append(args, a)
	}
	return append(args, "--kubeconfig="+kubeconfigDir+"/kubeconfig")
}

// writeRuncConfig turns runc's default spec into the pod's: the image's
// user and working directory, no capabilities, no new privileges, a
// read-only root, the kubeconfig mounted read-only, and the host's network
// (the API server and the endpoints are on 127.0.0.1).
func writeRuncConfig(t *testing.T, bundle string, cfg imageConfig, args []string, kdir string) {
	g := NewWithT(t)
	out, err := exec.Command(tool(t, "runc"), "spec", "--bundle", bundle).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "runc spec: %s", out)
	raw, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	g.Expect(err).NotTo(HaveOccurred())
	var spec map[string]any
	g.Expect(json.Unmarshal(raw, &spec)).To(Succeed())
	var uid, gid int
	_, err = fmt.Sscanf(cfg.Config.User, "%d:%d", &uid, &gid)
	g.Expect(err).NotTo(HaveOccurred(), "user %q", cfg.Config.User)
	process := spec["process"].(map[string]any)
	process["terminal"] = false
	process["args"] = args
	process["env"] = cfg.Config.Env
	process["cwd"] = cfg.Config.WorkingDir
	process["user"] = map[string]any{"uid": uid, "gid": gid}
	process["capabilities"] = map[string]any{}
	process["noNewPrivileges"] = true
	spec["root"] = map[string]any{"path": "rootfs", "readonly": true}
	spec["mounts"] = append(spec["mounts"].([]any), map[string]any{
		"destination": kubeconfigDir, "type": "bind", "source": kdir, "options": []string{"bind", "ro", "nosuid", "nodev", "noexec"},
	})
	linux := spec["linux"].(map[string]any)
	var namespaces []any
	for _, ns := range linux["namespaces"].([]any) {
		if ns.(map[string]any)["type"] != "network" {
			namespaces = append(namespaces, ns)
		}
	}
	linux["namespaces"] = namespaces
	raw, err = json.MarshalIndent(spec, "", "  ")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(bundle, "config.json"), raw, 0o600)).To(Succeed())
}

// container is a runc container running in the foreground of a runc
// process.
type container struct {
	runc, root, id string
	log            *run.Buffer
}

func startContainer(t *testing.T, bundle string) *container {
	g := NewWithT(t)
	c := &container{runc: tool(t, "runc"), root: filepath.Join(bundle, "state"), id: fmt.Sprintf("dualca-test-%d", os.Getpid()), log: &run.Buffer{}}
	cmd := exec.Command(c.runc, "--root", c.root, "run", "--bundle", bundle, c.id)
	w := c.log
	cmd.Stdout, cmd.Stderr = w, w
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = exec.Command(c.runc, "--root", c.root, "kill", c.id, "KILL").Run()
		_ = cmd.Wait()
		_ = exec.Command(c.runc, "--root", c.root, "delete", "--force", c.id).Run()
		if t.Failed() {
			t.Logf("the container's output:\n%s", c.log)
		}
	})
	return c
}

// pid is the container's init process, dualca, as seen from the host.
func (c *container) pid(t *testing.T) int {
	out, err := exec.Command(c.runc, "--root", c.root, "state", c.id).Output()
	if err != nil {
		t.Fatalf("runc state: %v", err)
	}
	var state struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &state); err != nil || state.Status != "running" {
		t.Fatalf("runc state: %v %s", err, out)
	}
	return state.Pid
}

// exec runs a command in the running container as user.
func (c *container) exec(t *testing.T, user string, args ...string) string {
	out, err := exec.Command(c.runc, append([]string{"--root", c.root, "exec", "--user", user, c.id}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("runc exec %q: %v: %s", args, err, out)
	}
	return string(out)
}

// signedBy checks that the first certificate of chain is root or is signed
// by it. Its errors carry no certificate bytes.
func signedBy(chain []byte, root *certs.CA) error {
	block, _ := pem.Decode(chain)
	if block == nil {
		return errors.New("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("parsing the certificate: %w", err)
	}
	if cert.Equal(root.Cert) {
		return nil
	}
	return cert.CheckSignatureFrom(root.Cert)
}

func httpGet(url string) (int, error) {
	resp, err := http.Get(url) //nolint:gosec // G107: the test's own endpoint on 127.0.0.1
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
