package deploy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var (
	versionTagRE = regexp.MustCompile(`^v?\d+\.\d+\.\d+([-+._][0-9A-Za-z._-]+)?$`)
	digestRE     = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
)

// ImagePinned accepts a reference with a digest or a full version tag
// (1.2.3, v1.2.3, 1.2.3-suffix): never latest, a bare major or no tag.
func ImagePinned(ref string) error {
	if digestRE.MatchString(ref) {
		return nil
	}
	name := ref[strings.LastIndex(ref, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok {
		return fmt.Errorf("image %q has no tag (means latest)", ref)
	}
	if !versionTagRE.MatchString(tag) {
		return fmt.Errorf("image %q: tag %q is not a full version (want e.g. 1.2.3 or v1.2.3, or a digest)", ref, tag)
	}
	return nil
}

// ImageTag is the tag of an image reference, "" when it has none.
func ImageTag(ref string) string {
	name := ref[strings.LastIndex(ref, "/")+1:]
	_, tag, _ := strings.Cut(name, ":")
	tag, _, _ = strings.Cut(tag, "@")
	return tag
}

// LeadingVersion parses the x.y.z at the start of a tag or go directive.
func LeadingVersion(s string) ([3]int, bool) {
	m := regexp.MustCompile(`^v?(\d+)\.(\d+)(?:\.(\d+))?`).FindStringSubmatch(s)
	if m == nil {
		return [3]int{}, false
	}
	var v [3]int
	for i := range 3 {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v, true
}
