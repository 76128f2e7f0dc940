package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestBuildLayout builds the layout for both platforms and checks each image
// as a runtime would see it, against the Dockerfile where it says the same.
func TestBuildLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the service twice")
	}
	repo := filepath.Join("..", "..")
	out := filepath.Join(t.TempDir(), "oci")
	o := Options{Out: out, Repo: repo, Platforms: []string{"linux/amd64", "linux/arm64"}, Revision: "0123abc", CABundle: caPath}
	if _, err := os.Stat(caPath); err != nil {
		t.Fatalf("the CA bundle (Debian's ca-certificates) is missing: %v", err)
	}
	if err := Build(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	version := readVersion(t, repo)
	wantEntry, wantUser := dockerfileRuntime(t, repo)

	root, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatalf("reading the layout: %v", err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || !rm.Manifests[0].MediaType.IsIndex() || rm.Manifests[0].Annotations[refNameKey] != version {
		t.Fatalf("index.json: %+v; want one image index tagged %s", rm.Manifests, version)
	}
	idx, err := root.ImageIndex(rm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		where := d.Platform.Architecture
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s: config says %s/%s", where, cf.OS, cf.Architecture)
		}
		if argv := append(slices.Clone(cf.Config.Entrypoint), cf.Config.Cmd...); !slices.Equal(argv, wantEntry) {
			t.Errorf("%s: entrypoint + cmd %q, the Dockerfile's %q", where, argv, wantEntry)
		}
		if cf.Config.User != wantUser || !strings.HasPrefix(cf.Config.User, "65532") {
			t.Errorf("%s: user %q, the Dockerfile's %q", where, cf.Config.User, wantUser)
		}
		for k, v := range map[string]string{
			"org.opencontainers.image.source":   sourceURL,
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": "0123abc",
		} {
			if cf.Config.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", where, k, cf.Config.Labels[k], v)
			}
		}
		files := extract(t, img)
		for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh"} {
			if _, ok := files[shell]; ok {
				t.Errorf("%s: the image has /%s", where, shell)
			}
		}
		if len(files) != 9 {
			t.Errorf("%s: %d entries, want the binary, the CA bundle, /data and their directories: %v", where, len(files), keys(files))
		}
		ca, _ := os.ReadFile(caPath)
		if f := files[strings.TrimPrefix(caPath, "/")]; f == nil || !bytes.Equal(f.data, ca) {
			t.Errorf("%s: %s is not this machine's CA bundle", where, caPath)
		}
		if f := files[strings.TrimPrefix(dataDir, "/")]; f == nil || f.hdr.Typeflag != tar.TypeDir || f.hdr.Uid != 65532 || f.hdr.Mode&0o200 == 0 {
			t.Errorf("%s: /data is not a directory the runtime user (65532) can write: %+v", where, f)
		}
		bin := files[strings.TrimPrefix(wantEntry[0], "/")]
		if bin == nil || bin.hdr.Mode&0o111 == 0 {
			t.Fatalf("%s: no executable %s", where, wantEntry[0])
		}
		checkStatic(t, where, bin.data, d.Platform.Architecture)
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("the image index holds %v, want linux/amd64 and linux/arm64", platforms)
	}
	if err := Build(t.Context(), o); err == nil {
		t.Error("a second build into the same directory succeeded; it must refuse to mix two layouts")
	}
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// extract reads the image's filesystem as a container runtime unpacks it.
func extract(t *testing.T, img v1.Image) map[string]*entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]*entry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("reading the image's filesystem: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = &entry{hdr: h, data: data}
	}
}

func keys(m map[string]*entry) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkStatic: an ELF for the platform, with no interpreter (static:
// nothing to load from an empty base) and not built with cgo.
func checkStatic(t *testing.T, where string, b []byte, arch string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: the binary is not ELF: %v", where, err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		t.Errorf("%s: ELF machine %v, want %v", where, f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: the binary is dynamically linked; the empty base has no loader", where)
		}
	}
}

func readVersion(t *testing.T, repo string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// dockerfileRuntime reads the Dockerfile's last stage: ENTRYPOINT + CMD and
// USER, which the image must match.
func dockerfileRuntime(t *testing.T, repo string) (argv []string, user string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := regexp.MustCompile(`(?m)^FROM `).Split(string(b), -1)
	last := stages[len(stages)-1]
	var entry, cmd []string
	for _, line := range strings.Split(last, "\n") {
		f := strings.SplitN(strings.TrimSpace(line), " ", 2)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(f[1]), &v); err != nil {
				t.Fatalf("Dockerfile: %s %s is not the exec form: %v", f[0], f[1], err)
			}
			if f[0] == "CMD" {
				cmd = v
			} else {
				entry = v
			}
		case "USER":
			user = strings.TrimSpace(f[1])
		}
	}
	if len(entry) == 0 || user == "" {
		t.Fatal("Dockerfile: no ENTRYPOINT or USER in the runtime stage")
	}
	return append(entry, cmd...), user
}
