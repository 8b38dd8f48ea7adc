package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// wantMachine is the ELF machine each platform's binary must be built for.
var wantMachine = map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}

// TestTheRegistryServesTheImage pushes the image index to the registry,
// pulls it back by digest and checks what a cluster would run: one image
// per platform, each running the static binary alone as 65532, labelled
// with where it comes from, and an SBOM referring to each.
func TestTheRegistryServesTheImage(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	_, b, p := pushedImage(t)

	g.Expect(p.index.MediaType).To(Equal(indexType))
	g.Expect(p.index.Annotations).To(Equal(wantLabels(t)))
	g.Expect(p.manifests).To(HaveLen(2))
	g.Expect(p.manifests).To(HaveKey("linux/amd64"))
	g.Expect(p.manifests).To(HaveKey("linux/arm64"))
	for plat, m := range p.manifests {
		cfg := p.configs[plat]
		g.Expect(m.MediaType).To(Equal(manifestType), plat)
		g.Expect(m.Config.MediaType).To(Equal(configType), plat)
		g.Expect(plat).To(Equal(cfg.OS+"/"+cfg.Architecture), "the config's platform is the index's")
		g.Expect(cfg.Created).To(Equal(time.Unix(testEpoch, 0).UTC().Format(time.RFC3339)), "%s: created at the commit time, not the build time", plat)
		g.Expect(cfg.Config.User).To(Equal("65532:65532"), plat)
		g.Expect(cfg.Config.Entrypoint).To(Equal([]string{"/dualca"}), plat)
		g.Expect(cfg.Config.Cmd).To(BeEmpty(), plat)
		g.Expect(cfg.Config.Env).To(BeEmpty(), "%s: nothing from a base image", plat)
		g.Expect(cfg.Config.Labels).To(Equal(wantLabels(t)), plat)
		g.Expect(m.Layers).To(HaveLen(1), "%s: the binary's layer alone, on an empty base", plat)
		g.Expect(m.Layers[0].MediaType).To(Equal(layerType), plat)
		g.Expect(cfg.RootFS.DiffIDs).To(HaveLen(1), plat)

		files := layerFiles(g, p.layers[plat][0])
		g.Expect(files).To(HaveLen(1), "%s: nothing but the binary in the image", plat)
		bin := files["dualca"]
		g.Expect(bin.hdr).NotTo(BeNil(), "%s: the layer holds /dualca", plat)
		g.Expect(bin.hdr.Typeflag).To(BeEquivalentTo(tar.TypeReg))
		g.Expect(bin.hdr.Mode).To(BeEquivalentTo(0o555), "%s: executable, not writable", plat)
		g.Expect(bin.hdr.Uid).To(BeZero())
		g.Expect(bin.hdr.ModTime.Unix()).To(Equal(testEpoch), "%s: the file's time is the commit time", plat)
		expectStatic(g, plat, bin.content)
		t.Logf("%s: manifest %s, compressed %d bytes (%.1f MiB)", plat, p.digests[plat], m.Layers[0].Size, float64(m.Layers[0].Size)/(1<<20))

		local, err := os.ReadFile(filepath.Join(b.dir, "sbom", strings.ReplaceAll(plat, "/", "-")+".spdx.json"))
		g.Expect(err).NotTo(HaveOccurred(), "the SBOM next to the layout")
		g.Expect(p.sboms[plat]).To(Equal(local), "%s: the registry's SBOM is the one next to the layout", plat)
		expectSBOM(t, g, plat, p.sboms[plat])
	}
}

func wantLabels(t *testing.T) map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":   "https://github.com/dualca/dualca",
		"org.opencontainers.image.version":  chartField(t, "appVersion"),
		"org.opencontainers.image.revision": testRevision,
		"org.opencontainers.image.created":  time.Unix(testEpoch, 0).UTC().Format(time.RFC3339),
		"org.opencontainers.image.title":    "dualca",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

type file struct {
	hdr     *tar.Header
	content []byte
}

// layerFiles unpacks a gzipped tar layer in memory.
func layerFiles(g *WithT, layer []byte) map[string]file {
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	g.Expect(err).NotTo(HaveOccurred())
	tr := tar.NewReader(zr)
	files := map[string]file{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		g.Expect(err).NotTo(HaveOccurred())
		content, err := io.ReadAll(tr)
		g.Expect(err).NotTo(HaveOccurred())
		files[hdr.Name] = file{hdr: hdr, content: content}
	}
}

// expectStatic checks that the binary is an ELF executable for plat with
// no program interpreter: statically linked, so it runs on an empty base.
func expectStatic(g *WithT, plat string, content []byte) {
	f, err := elf.NewFile(bytes.NewReader(content))
	g.Expect(err).NotTo(HaveOccurred(), "%s: /dualca is an ELF file", plat)
	g.Expect(f.Machine).To(Equal(wantMachine[plat]), plat)
	for _, prog := range f.Progs {
		g.Expect(prog.Type).NotTo(Equal(elf.PT_INTERP), "%s: statically linked", plat)
	}
	_, err = f.DynamicSymbols()
	g.Expect(err).To(HaveOccurred(), "%s: no dynamic symbols", plat)
}

// expectSBOM checks that the SPDX document lists the modules dualca is
// built from at the versions go.mod requires.
func expectSBOM(t *testing.T, g *WithT, plat string, sbom []byte) {
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name        string `json:"name"`
			VersionInfo string `json:"versionInfo"`
		} `json:"packages"`
	}
	g.Expect(json.Unmarshal(sbom, &doc)).To(Succeed())
	g.Expect(doc.SPDXVersion).To(Equal("SPDX-2.3"))
	versions := map[string]string{}
	for _, p := range doc.Packages {
		versions[p.Name] = p.VersionInfo
	}
	required := goModRequires(t)
	for _, mod := range []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "github.com/cert-manager/cert-manager"} {
		g.Expect(required).To(HaveKey(mod))
		g.Expect(versions).To(HaveKeyWithValue(mod, required[mod]), "%s: the SBOM has %s at go.mod's version", plat, mod)
	}
	g.Expect(versions).To(HaveKeyWithValue("github.com/dualca/dualca", chartField(t, "appVersion")))
	g.Expect(versions).To(HaveKeyWithValue("stdlib", HavePrefix("go1.")))
	// The Go modules: every package but dualca itself and the standard library.
	t.Logf("%s: the SBOM lists %d Go modules (and dualca, and the standard library %s)", plat, len(doc.Packages)-2, versions["stdlib"])
}

// goModRequires reads the module versions the repository's go.mod requires.
func goModRequires(t *testing.T) map[string]string {
	b, err := os.ReadFile(filepath.Join(controlplane.TestRepoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	req := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(fields) >= 2 && strings.HasPrefix(fields[1], "v") {
			req[fields[0]] = fields[1]
		}
	}
	return req
}

// TestTheBuildIsReproducible builds the image a second time into another
// directory and gets the same digest; then builds it with one source file
// changed (through go build's -overlay, so the tree is not touched) and
// gets another image for that platform. The Go build cache is warm here;
// that two builds from empty caches agree too is shown by hand: two `make
// image` runs, each with an empty GOCACHE.
func TestTheBuildIsReproducible(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	first := sharedBuild(t)
	second := buildImage(t, t.TempDir())
	g.Expect(second.digest).To(Equal(first.digest), "two builds of the same source")

	root := controlplane.TestRepoRoot(t)
	source := filepath.Join(root, "cmd", "dualca", "main.go")
	orig, err := os.ReadFile(source)
	g.Expect(err).NotTo(HaveOccurred())
	changed := bytes.Replace(orig, []byte("print this help"), []byte("print this help text"), 1)
	g.Expect(changed).NotTo(Equal(orig), "the change applies")
	dir := t.TempDir()
	replacement := filepath.Join(dir, "main.go")
	g.Expect(os.WriteFile(replacement, changed, 0o600)).To(Succeed())
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {source: replacement}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o600)).To(Succeed())
	// One platform is enough to see the change, and saves a link.
	third := buildImage(t, filepath.Join(dir, "out"), "-overlay", filepath.Join(dir, "overlay.json"), "-platforms", "linux/amd64")
	g.Expect(platformDigest(g, third, "amd64")).NotTo(Equal(platformDigest(g, first, "amd64")), "a changed source file changes the image")
}

// platformDigest reads the manifest digest of arch's image from a build's
// layout.
func platformDigest(g *WithT, b build, arch string) string {
	raw, err := os.ReadFile(filepath.Join(b.dir, "oci", "blobs", "sha256", strings.TrimPrefix(b.digest, "sha256:")))
	g.Expect(err).NotTo(HaveOccurred())
	var idx manifest
	g.Expect(json.Unmarshal(raw, &idx)).To(Succeed())
	for _, d := range idx.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			return d.Digest
		}
	}
	g.Expect(idx.Manifests).To(ContainElement(HaveField("Platform.Architecture", arch)))
	return ""
}
