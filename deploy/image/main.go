// Command image assembles the scorerefresh container image as an OCI image layout, for
// linux/amd64 and linux/arm64, without Docker or pulling anything: the image the Dockerfile
// builds (a static binary on an empty base, the CA bundle, /data owned by the runtime user, uid
// 65532), from this machine's Go toolchain and CA bundle.
//
//	go -C deploy/image run . --out /tmp/scorerefresh-oci
//	crane push /tmp/scorerefresh-oci ghcr.io/you/scorerefresh:v1.2.3
//	skopeo copy --all oci:/tmp/scorerefresh-oci:v1.2.3 docker://ghcr.io/you/scorerefresh:v1.2.3
//
// It is a module of its own so that go-containerregistry never enters the
// service's go.mod. The root module's deploy tests run this module's tests.
package main

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the Dockerfile's runtime stage holds (the test compares entrypoint and user with it).
const (
	binaryPath = "/usr/local/bin/scorerefresh"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	dataDir    = "/data"
	uid, gid   = 65532, 65532
	metricsTCP = "9090/tcp"
	sourceURL  = "https://github.com/scorerefresh/scorerefresh"
	refNameKey = "org.opencontainers.image.ref.name"
)

type Options struct {
	Out       string   // the OCI layout directory to write
	Repo      string   // the repository root (go.mod of the service, VERSION)
	Platforms []string // os/arch pairs
	Version   string   // empty: the VERSION file
	Revision  string   // empty: git rev-parse HEAD, else "unknown"
	CABundle  string   // the CA bundle copied to caPath
	Created   time.Time
}

func main() {
	var o Options
	var platforms string
	flag.StringVar(&o.Out, "out", "", "directory to write the OCI image layout to (required; must not exist or be empty)")
	flag.StringVar(&o.Repo, "repo", "../..", "the repository root")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch pairs")
	flag.StringVar(&o.Version, "version", "", "the version baked in and labelled (default: the VERSION file)")
	flag.StringVar(&o.Revision, "revision", "", "the revision baked in and labelled (default: git rev-parse HEAD)")
	flag.StringVar(&o.CABundle, "ca-bundle", caPath, "the CA bundle to ship (Debian's ca-certificates)")
	flag.Parse()
	if o.Out == "" {
		fmt.Fprintln(os.Stderr, "image: --out is required")
		flag.Usage()
		os.Exit(2)
	}
	o.Platforms = strings.Split(platforms, ",")
	if err := Build(context.Background(), o); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (%s)\n", o.Out, strings.Join(o.Platforms, ", "))
}

// Build writes the layout: its index.json names one image index (tagged with
// the version, for skopeo's oci:DIR:TAG) of one image per platform.
func Build(ctx context.Context, o Options) error {
	if err := o.defaults(ctx); err != nil {
		return err
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return fmt.Errorf("reading the CA bundle: %w", err)
	}
	work, err := os.MkdirTemp("", "scorerefresh-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.Platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil || plat.OS != "linux" || plat.Architecture == "" {
			return fmt.Errorf("platform %q: want linux/ARCH", p)
		}
		binary, err := goBuild(ctx, o, plat.Architecture, work)
		if err != nil {
			return err
		}
		img, err := platformImage(o, *plat, binary, ca)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: plat.OS, Architecture: plat.Architecture, Variant: plat.Variant}},
		})
	}
	if entries, err := os.ReadDir(o.Out); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s exists and is not empty: give a new directory", o.Out)
	}
	lp, err := layout.Write(o.Out, empty.Index)
	if err != nil {
		return fmt.Errorf("starting the layout: %w", err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameKey: o.Version})); err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	return nil
}

func (o *Options) defaults(ctx context.Context) error {
	if len(o.Platforms) == 0 {
		return errors.New("no platform")
	}
	o.CABundle = cmp.Or(o.CABundle, caPath)
	if o.Version == "" {
		v, err := os.ReadFile(filepath.Join(o.Repo, "VERSION"))
		if err != nil {
			return fmt.Errorf("reading the version: %w", err)
		}
		o.Version = strings.TrimSpace(string(v))
	}
	if o.Revision == "" {
		o.Revision = "unknown"
		if out, err := exec.CommandContext(ctx, "git", "-C", o.Repo, "rev-parse", "HEAD").Output(); err == nil {
			o.Revision = strings.TrimSpace(string(out))
		}
	}
	if o.Created.IsZero() {
		// The commit's time, not now: the same commit gives the same image.
		o.Created = time.Unix(0, 0).UTC()
		out, err := exec.CommandContext(ctx, "git", "-C", o.Repo, "log", "-1", "--format=%ct").Output()
		if secs, perr := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && perr == nil {
			o.Created = time.Unix(secs, 0).UTC()
		}
	}
	return nil
}

// goBuild is the Dockerfile's go build: static, trimmed, the version and
// revision baked in, cross-compiled without emulation; it returns the binary, built in dir.
func goBuild(ctx context.Context, o Options, arch, dir string) ([]byte, error) {
	out := filepath.Join(dir, "scorerefresh-"+arch)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+o.Version+" -X main.revision="+o.Revision,
		"-o", out, "./cmd/scorerefresh")
	cmd.Dir = o.Repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build for linux/%s: %w\n%s", arch, err, b)
	}
	return os.ReadFile(out)
}

func platformImage(o Options, plat v1.Platform, binary, ca []byte) (v1.Image, error) {
	rootfs, err := rootFS(o.Created, binary, ca)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(rootfs)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("making the layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
		Created: v1.Time{Time: o.Created}, CreatedBy: "deploy/image: go build ./cmd/scorerefresh, CA bundle, /data", Comment: "scorerefresh " + o.Version,
	}})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Created = v1.Time{Time: o.Created}
	cf.Config = v1.Config{
		Entrypoint:   []string{binaryPath},
		Cmd:          []string{"run"},
		User:         fmt.Sprintf("%d:%d", uid, gid),
		WorkingDir:   dataDir,
		ExposedPorts: map[string]struct{}{metricsTCP: {}},
		Labels: map[string]string{
			"org.opencontainers.image.source":   sourceURL,
			"org.opencontainers.image.version":  o.Version,
			"org.opencontainers.image.revision": o.Revision,
			"org.opencontainers.image.title":    "scorerefresh",
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image config: %w", err)
	}
	return mutate.CreatedAt(img, v1.Time{Time: o.Created})
}

// rootFS is the image's one layer: the binary, the CA bundle and /data,
// with their parent directories, owned by root except /data.
func rootFS(mtime time.Time, binary, ca []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, owner int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: owner, Gid: owner, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	var errs []error // a tar.Writer that failed fails every later call
	for _, d := range []string{"etc", "etc/ssl", "etc/ssl/certs", "usr", "usr/local", "usr/local/bin"} {
		errs = append(errs, dir(d, 0o755, 0))
	}
	errs = append(errs, dir(strings.TrimPrefix(dataDir, "/"), 0o755, uid), file(strings.TrimPrefix(caPath, "/"), 0o644, ca),
		file(strings.TrimPrefix(binaryPath, "/"), 0o755, binary), tw.Close())
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
