package critest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/netshim/netshim/test/harness"
)

// The kinds of critest's images (hack/critest-images.sh, which builds them,
// is where the list lives; `critest-images.sh list` prints it).
const (
	// kindContainer: containers are made from it under its original
	// names: it keeps every name.
	kindContainer = "container"
	// kindStatus: pulled by the image specs, whose status is then asked
	// under the original name: keeps the original name only.
	kindStatus = "status"
	// kindPulled: pulled by the image specs only: no local name is left,
	// so that the pull really pulls.
	kindPulled = "pulled"
)

// The images critest's specs run containers from, named in its
// --test-images-file by their names in the registry.
const (
	defaultTestImage = "registry.k8s.io/e2e-test-images/busybox:1.29-2"
	webServerImage   = "registry.k8s.io/e2e-test-images/nginx:1.14-2"
)

// testImage is one line of `critest-images.sh list`.
type testImage struct {
	Key, Kind string
	Names     []string
}

// parseImageList reads `critest-images.sh list`: "KEY KIND NAME..." per
// line.
func parseImageList(out string) ([]testImage, error) {
	var images []testImage
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("critest-images.sh list: line %q: want KEY KIND NAME [NAME...]", l)
		}
		if !slices.Contains([]string{kindContainer, kindStatus, kindPulled}, f[1]) {
			return nil, fmt.Errorf("critest-images.sh list: line %q: kind %q is not container, status or pulled", l, f[1])
		}
		images = append(images, testImage{Key: f[0], Kind: f[1], Names: f[2:]})
	}
	if len(images) == 0 {
		return nil, fmt.Errorf("critest-images.sh list printed no image")
	}
	return images, nil
}

// pushStep pushes the local image Src as Dst.
type pushStep struct{ Src, Dst string }

// pushPlan is what goes to the registry and which local names go after.
type pushPlan struct {
	Pushes []pushStep
	// Drop are the local names removed after the pushes, so that the
	// image specs really pull them: the registry names of the images
	// only those specs use, and the original names of the pulled ones.
	Drop []string
}

// planPush pushes every name of every image under its path and tag, and
// each path once more as :latest (critest's -registry-prefix drops tags).
// Images that containers are made from keep every name; the registry
// names of the others are dropped, and so are the original names of the
// pulled-only ones.
func planPush(images []testImage, nameWithTag func(ref, tag string) (string, error)) (pushPlan, error) {
	var p pushPlan
	latestDone := map[string]bool{}
	for _, img := range images {
		for _, n := range img.Names {
			dst, err := nameWithTag(n, "")
			if err != nil {
				return pushPlan{}, err
			}
			latest, err := nameWithTag(n, "latest")
			if err != nil {
				return pushPlan{}, err
			}
			targets := []string{dst}
			if !latestDone[latest] {
				latestDone[latest] = true
				if latest != dst {
					targets = append(targets, latest)
				}
			}
			for _, t := range targets {
				p.Pushes = append(p.Pushes, pushStep{n, t})
				if img.Kind != kindContainer {
					p.Drop = append(p.Drop, t)
				}
			}
			if img.Kind == kindPulled {
				p.Drop = append(p.Drop, n)
			}
		}
	}
	return p, nil
}

// pushImages pushes critest's images to reg and removes the local names
// the image specs must pull. The registry names left are removed when reg
// is closed; the original names dropped come back with the next
// `critest-images.sh build`.
func pushImages(ctx context.Context, reg *harness.Registry, cli harness.DockerCLI, images []testImage) error {
	for _, img := range images {
		for _, n := range img.Names {
			if _, err := cli.Docker("image", "inspect", "--format", "{{.Id}}", n); err != nil {
				return fmt.Errorf("%s is missing: run hack/critest-images.sh build first", n)
			}
		}
	}
	plan, err := planPush(images, reg.NameWithTag)
	if err != nil {
		return err
	}
	for _, s := range plan.Pushes {
		if err := reg.PushAs(ctx, cli, s.Src, s.Dst); err != nil {
			return err
		}
	}
	for _, d := range plan.Drop {
		if _, err := cli.Docker("image", "inspect", "--format", "{{.Id}}", d); err != nil {
			continue
		}
		if out, err := cli.Docker("image", "rm", d); err != nil {
			return fmt.Errorf("docker image rm %s: %w\n%s", d, err, strings.TrimSpace(out))
		}
	}
	return nil
}
