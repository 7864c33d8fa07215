package tests

// The images' Dockerfiles (services/<service>/Dockerfile) are checked here
// without a Docker engine: a small parser of the instructions they use, and
// checks that each builds the real ./services/<service>/cmd/<service>
// package as a static binary onto a distroless (or scratch) image that runs
// it as a numeric non-root user, and that the manifests run each program
// from its own service's image as that user.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dockerServices are the services with an image: services/<name>/Dockerfile.
var dockerServices = []string{"decider", "edge", "provsim"}

// dockerInstr is one instruction: its keyword (upper case), its --flags and
// the rest of its arguments, whitespace-separated (ENTRYPOINT keeps its raw
// text in raw).
type dockerInstr struct {
	line  int
	cmd   string
	flags map[string][]string
	args  []string
	raw   string
}

// dockerStage is one FROM and what follows it.
type dockerStage struct {
	image, name string
	instrs      []dockerInstr
}

// dockerKnown are the instructions the parser understands; anything else is
// an error, so a new instruction gets a thought about what to check.
var dockerKnown = map[string]bool{"FROM": true, "ARG": true, "WORKDIR": true, "COPY": true, "RUN": true, "ENV": true, "USER": true, "ENTRYPOINT": true}

var dockerFlag = regexp.MustCompile(`^--([a-z-]+)=(.*)$`)

// parseDockerfile splits a Dockerfile into stages of instructions: comments
// and blank lines dropped, backslash continuations joined.
func parseDockerfile(text string) ([]dockerStage, error) {
	var stages []dockerStage
	var errs []error
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				continue
			}
			l = strings.TrimSuffix(l, "\\") + " " + next
		}
		cmd, rest, _ := strings.Cut(l, " ")
		in := dockerInstr{line: start, cmd: strings.ToUpper(cmd), flags: map[string][]string{}, raw: strings.TrimSpace(rest)}
		if !dockerKnown[in.cmd] {
			errs = append(errs, fmt.Errorf("line %d: instruction %s is not one this test knows", start, in.cmd))
			continue
		}
		for f := range strings.FieldsSeq(rest) {
			if m := dockerFlag.FindStringSubmatch(f); m != nil && len(in.args) == 0 {
				in.flags[m[1]] = append(in.flags[m[1]], m[2])
				continue
			}
			in.args = append(in.args, f)
		}
		if in.cmd == "FROM" {
			st := dockerStage{}
			switch {
			case len(in.args) == 1:
				st.image = in.args[0]
			case len(in.args) == 3 && strings.EqualFold(in.args[1], "AS"):
				st.image, st.name = in.args[0], in.args[2]
			default:
				errs = append(errs, fmt.Errorf("line %d: FROM image [AS name]", start))
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				errs = append(errs, fmt.Errorf("line %d: %s before the first FROM", start, in.cmd))
			}
			continue
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
	}
	return stages, errors.Join(errs...)
}

// dockerImage is what a Dockerfile's final image runs.
type dockerImage struct {
	entrypoint string // the binary
	uid        int64
}

var dockerGoBuild = regexp.MustCompile(`(?:^|\s)go build\s`)

// checkDockerfile checks the Dockerfile of service, read from the
// repository at root, and returns what its image runs.
func checkDockerfile(root, service, text string) (dockerImage, error) {
	var img dockerImage
	stages, err := parseDockerfile(text)
	if err != nil {
		return img, err
	}
	if len(stages) < 2 {
		return img, errors.New("multi-stage: a build stage and the final image")
	}
	var errs []error
	build := map[string]string{} // stage name -> the binary its go build writes
	for _, st := range stages[:len(stages)-1] {
		if !strings.HasPrefix(st.image, "golang:") {
			errs = append(errs, fmt.Errorf("build stage %s: FROM %s, want golang:<version>", st.name, st.image))
			continue
		}
		out, err := checkDockerBuildStage(root, service, st)
		if err != nil {
			errs = append(errs, fmt.Errorf("build stage %s: %w", st.name, err))
			continue
		}
		build[st.name] = out
	}
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final.image, "gcr.io/distroless/static") && final.image != "scratch" {
		errs = append(errs, fmt.Errorf("final stage: FROM %s, want gcr.io/distroless/static-* or scratch (a static binary needs nothing more)", final.image))
	}
	copied := map[string]bool{} // paths in the final image of binaries the build stages made
	user := ""
	var entry []string
	for _, in := range final.instrs {
		switch in.cmd {
		case "COPY":
			from := in.flags["from"]
			if len(from) != 1 || build[from[0]] == "" || len(in.args) != 2 || in.args[0] != build[from[0]] {
				errs = append(errs, fmt.Errorf("line %d: the final stage copies only the built binary: COPY --from=<build stage> <its go build -o> <path>", in.line))
				continue
			}
			dest := in.args[1]
			if strings.HasSuffix(dest, "/") {
				dest += path.Base(in.args[0])
			}
			copied[dest] = true
		case "USER":
			user = strings.Join(in.args, " ")
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.raw), &entry); err != nil {
				errs = append(errs, fmt.Errorf("line %d: ENTRYPOINT must be the exec form (a JSON array): the image has no shell", in.line))
			}
		case "RUN":
			errs = append(errs, fmt.Errorf("line %d: RUN in the final stage: it has no shell", in.line))
		}
	}
	uidText, _, _ := strings.Cut(user, ":")
	uid, err := strconv.ParseInt(uidText, 10, 64)
	switch {
	case user == "":
		errs = append(errs, errors.New("final stage: no USER: the image would run as root"))
	case err != nil:
		errs = append(errs, fmt.Errorf("final stage: USER %s must be numeric, or the kubelet's runAsNonRoot cannot verify it", user))
	case uid == 0:
		errs = append(errs, errors.New("final stage: USER 0 is root"))
	}
	img.uid = uid
	switch {
	case len(entry) == 0:
		errs = append(errs, errors.New("final stage: ENTRYPOINT [\"<binary>\"] is required"))
	case !copied[entry[0]]:
		errs = append(errs, fmt.Errorf("final stage: ENTRYPOINT runs %s, but the binary is copied to %v", entry[0], deploySorted(copied)))
	default:
		img.entrypoint = entry[0]
	}
	return img, errors.Join(errs...)
}

// checkDockerBuildStage follows WORKDIR and COPY through a build stage to the
// repository folder its go build builds, which must be the service's
// command, and returns the binary the build writes.
func checkDockerBuildStage(root, service string, st dockerStage) (string, error) {
	wantPkg := path.Join("services", service, "cmd", service)
	workdir := "/"
	copies := map[string]string{} // path in the stage -> repository path
	var out string
	var errs []error
	for _, in := range st.instrs {
		switch in.cmd {
		case "WORKDIR":
			workdir = path.Join(workdir, in.args[0])
			if path.IsAbs(in.args[0]) {
				workdir = path.Clean(in.args[0])
			}
		case "COPY":
			if len(in.flags["from"]) > 0 || len(in.args) < 2 {
				continue
			}
			dest := path.Join(workdir, in.args[len(in.args)-1])
			for _, src := range in.args[:len(in.args)-1] {
				if strings.HasSuffix(in.args[len(in.args)-1], "/") && len(in.args) > 2 {
					copies[path.Join(dest, path.Base(src))] = path.Clean(src)
				} else {
					copies[dest] = path.Clean(src)
				}
			}
		case "RUN":
			cmd := strings.Join(in.args, " ")
			if !dockerGoBuild.MatchString(cmd) {
				continue
			}
			if out != "" {
				errs = append(errs, fmt.Errorf("line %d: a second go build", in.line))
			}
			if !regexp.MustCompile(`(?:^|\s)CGO_ENABLED=0\s`).MatchString(cmd) {
				errs = append(errs, fmt.Errorf("line %d: go build without CGO_ENABLED=0: the binary would need a C library the image lacks", in.line))
			}
			fields := strings.Fields(cmd[dockerGoBuild.FindStringIndex(cmd)[1]:])
			for i, f := range fields {
				if f == "-o" && i+1 < len(fields) {
					out = fields[i+1]
				}
			}
			if out == "" || !path.IsAbs(out) {
				errs = append(errs, fmt.Errorf("line %d: go build needs -o with an absolute path", in.line))
			}
			pkg := fields[len(fields)-1]
			repoPath, ok := dockerRepoPath(copies, path.Join(workdir, pkg))
			switch {
			case !strings.HasPrefix(pkg, "./"):
				errs = append(errs, fmt.Errorf("line %d: go build's last argument %s must be the package, ./…", in.line, pkg))
			case !ok:
				errs = append(errs, fmt.Errorf("line %d: go build %s: %s is not in a folder the stage copied from the repository", in.line, pkg, path.Join(workdir, pkg)))
			case repoPath != wantPkg:
				errs = append(errs, fmt.Errorf("line %d: go build builds %s, want %s", in.line, repoPath, wantPkg))
			default:
				if err := dockerMainPackage(filepath.Join(root, filepath.FromSlash(repoPath))); err != nil {
					errs = append(errs, fmt.Errorf("line %d: %s: %w", in.line, repoPath, err))
				}
			}
		}
	}
	if out == "" && len(errs) == 0 {
		errs = append(errs, errors.New("no RUN … go build"))
	}
	return out, errors.Join(errs...)
}

// dockerRepoPath maps a path of the build stage back to the repository path
// a COPY put there.
func dockerRepoPath(copies map[string]string, p string) (string, bool) {
	best := ""
	for dest := range copies {
		if (p == dest || strings.HasPrefix(p, dest+"/")) && len(dest) > len(best) {
			best = dest
		}
	}
	if best == "" {
		return "", false
	}
	return path.Join(copies[best], strings.TrimPrefix(p, best)), true
}

// dockerMainPackage requires dir to hold a Go main package.
func dockerMainPackage(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "main.go"))
	if err != nil {
		return fmt.Errorf("no main.go: %w", err)
	}
	if !regexp.MustCompile(`(?m)^package main$`).Match(data) {
		return errors.New("main.go is not package main")
	}
	return nil
}

// dockerImages checks every service's Dockerfile once and returns what each
// image runs, by service.
func dockerImages() (map[string]dockerImage, error) {
	out := map[string]dockerImage{}
	var errs []error
	for _, svc := range dockerServices {
		data, err := os.ReadFile(filepath.Join(repoRoot, "services", svc, "Dockerfile"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		img, err := checkDockerfile(repoRoot, svc, string(data))
		if err != nil {
			errs = append(errs, fmt.Errorf("services/%s/Dockerfile: %w", svc, err))
			continue
		}
		out[svc] = img
	}
	return out, errors.Join(errs...)
}

// checkDeployImages requires each program's container to run its own
// service's image (the repository's last path element is the program), the
// image's entrypoint (no command), as the image's user.
func checkDeployImages(b *deployBundle) error {
	imgs, err := dockerImages()
	if err != nil {
		return err
	}
	ps, _ := b.programs() // errors are checkDeployFlags'
	var errs []error
	for _, p := range ps {
		repo := p.container.Image
		if i := strings.IndexAny(repo, "@"); i >= 0 {
			repo = repo[:i]
		}
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		}
		if name := path.Base(repo); name != p.program {
			errs = append(errs, fmt.Errorf("%s: image %s is not the %s image (services/%s/Dockerfile builds it as …/%s)", p, p.container.Image, p.program, p.program, p.program))
			continue
		}
		img := imgs[p.program]
		user := p.workload.pod.SecurityContext.RunAsUser
		if p.container.SecurityContext != nil && p.container.SecurityContext.RunAsUser != nil {
			user = p.container.SecurityContext.RunAsUser
		}
		if user != nil && *user != img.uid {
			errs = append(errs, fmt.Errorf("%s: runAsUser %d, the image's USER is %d", p, *user, img.uid))
		}
	}
	return errors.Join(errs...)
}

// TestDockerfiles checks every service's Dockerfile, and that no other
// Dockerfile is left in the repository to drift from them.
func TestDockerfiles(t *testing.T) {
	imgs, err := dockerImages()
	require.NoError(t, err)
	require.Len(t, imgs, len(dockerServices))
	var found []string
	for _, dir := range []string{"services", "deploy", "pkg", "proto", "tools"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !d.IsDir() && (d.Name() == "Dockerfile" || strings.HasSuffix(d.Name(), ".Dockerfile")) {
				rel, _ := filepath.Rel(repoRoot, p)
				found = append(found, filepath.ToSlash(rel))
			}
			return nil
		})
		require.NoError(t, err)
	}
	var want []string
	for _, svc := range dockerServices {
		want = append(want, "services/"+svc+"/Dockerfile")
	}
	slices.Sort(found)
	require.Equal(t, want, found, "one Dockerfile per service, in its folder")
}

// TestDockerfileChecksCatchBreakage breaks the edge's Dockerfile in one way
// each and requires checkDockerfile to notice.
func TestDockerfileChecksCatchBreakage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "services", "edge", "Dockerfile"))
	require.NoError(t, err)
	good := string(data)
	tests := []struct {
		name, old, new, wantErr string
	}{
		{"cgo on", "CGO_ENABLED=0", "CGO_ENABLED=1", "CGO_ENABLED=0"},
		{"another package", "./cmd/edge", "./cmd/edgebench", "want services/edge/cmd/edge"},
		{"a package not copied", "COPY services/edge services/edge", "COPY services/edge/internal services/edge/internal", "not in a folder the stage copied"},
		{"a full OS image", "FROM gcr.io/distroless/static-debian12:nonroot", "FROM debian:12", "want gcr.io/distroless/static"},
		{"root user", "USER 65532:65532", "USER 0", "USER 0 is root"},
		{"named user", "USER 65532:65532", "USER nonroot", "must be numeric"},
		{"no user", "USER 65532:65532\n", "", "no USER"},
		{"entrypoint elsewhere", `ENTRYPOINT ["/usr/local/bin/edge"]`, `ENTRYPOINT ["/edge"]`, "ENTRYPOINT runs /edge"},
		{"shell-form entrypoint", `ENTRYPOINT ["/usr/local/bin/edge"]`, `ENTRYPOINT /usr/local/bin/edge`, "exec form"},
		{"single stage", "FROM golang:1.26 AS build", "", "before the first FROM"},
		{"copies another file", "COPY --from=build /out/edge /usr/local/bin/edge", "COPY --from=build /out/decider /usr/local/bin/edge", "copies only the built binary"},
		{"unknown instruction", "USER 65532:65532", "USER 65532:65532\nHEALTHCHECK NONE", "HEALTHCHECK is not one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Contains(t, good, tt.old)
			_, err := checkDockerfile(repoRoot, "edge", strings.Replace(good, tt.old, tt.new, 1))
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	_, err = checkDockerfile(repoRoot, "edge", good)
	require.NoError(t, err)
}
