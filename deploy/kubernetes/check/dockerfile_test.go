package check

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The Dockerfile is checked without a Docker engine: what it says is read from it, and
// its `go build` command line is run as written, on the host, for the host's platform.
// What cannot be checked here: that the base image exists and builds it, and the
// image's layers.

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line  int
	cmd   string   // upper case: FROM, RUN, COPY, ...
	flags []string // leading --flag[=value] arguments
	args  string   // the rest
}

type stage struct {
	image, name string
	from        instruction
	ins         []instruction
}

// parseDockerfile splits a Dockerfile into stages of instructions. It knows comments,
// parser directives, continuation lines and leading --flags; a heredoc (<<EOF) fails,
// so that nothing it does not understand passes.
func parseDockerfile(src string) ([]stage, error) {
	var stages []stage
	var global []instruction // before the first FROM: ARG only
	sc := bufio.NewScanner(strings.NewReader(src))
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		start := lineNo
		for strings.HasSuffix(line, "\\") {
			line = strings.TrimSuffix(line, "\\")
			if !sc.Scan() {
				return nil, fmt.Errorf("line %d: continuation at the end of the file", lineNo)
			}
			lineNo++
			next := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(next, "#") {
				next = "\\" // a comment inside a continuation is dropped
			}
			line += " " + next
		}
		if strings.Contains(line, "<<") {
			return nil, fmt.Errorf("line %d: heredocs are not understood by this check", start)
		}
		cmd, rest, _ := strings.Cut(line, " ")
		in := instruction{line: start, cmd: strings.ToUpper(cmd)}
		rest = strings.TrimSpace(rest)
		for strings.HasPrefix(rest, "--") {
			f, r, _ := strings.Cut(rest, " ")
			in.flags = append(in.flags, f)
			rest = strings.TrimSpace(r)
		}
		in.args = rest
		if in.cmd == "FROM" {
			f := strings.Fields(rest)
			st := stage{from: in}
			if len(f) == 0 {
				return nil, fmt.Errorf("line %d: FROM without an image", start)
			}
			st.image = f[0]
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			} else if len(f) != 1 {
				return nil, fmt.Errorf("line %d: FROM %s: want IMAGE [AS NAME]", start, rest)
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				return nil, fmt.Errorf("line %d: %s before the first FROM", start, in.cmd)
			}
			global = append(global, in)
			continue
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	return stages, sc.Err()
}

func flagValue(flags []string, name string) string {
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// goBuild is the builder's `go build` command line.
type goBuild struct {
	in     instruction
	env    []string // NAME=value assignments before `go`
	args   []string // after `go`
	output string   // -o
}

var shellWord = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// splitShell splits a plain shell command line into words: double and single quotes,
// and ${NAME} or $NAME expanded from vars. Anything else a shell would do (;, &&, |,
// $(...), backquotes, globs) is refused rather than misread.
func splitShell(s string, vars map[string]string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'' && c != '\'':
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			inWord = true
			if quote == 0 {
				quote = c
			} else if quote == c {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '$':
			inWord = true
			name := ""
			if strings.HasPrefix(s[i:], "${") {
				end := strings.IndexByte(s[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("unclosed ${ in %q", s)
				}
				name, i = s[i+2:i+end], i+end
			} else {
				m := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`).FindString(s[i+1:])
				if m == "" {
					return nil, fmt.Errorf("a $ this check does not understand in %q", s)
				}
				name, i = m, i+len(m)
			}
			v, ok := vars[name]
			if !ok {
				return nil, fmt.Errorf("variable %s: not an ARG this check knows", name)
			}
			cur.WriteString(v)
		case quote == 0 && (c == ' ' || c == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case quote == 0 && strings.IndexByte(";&|<>`*?[\\(){}", c) >= 0:
			return nil, fmt.Errorf("%q: %q is shell syntax this check does not run; keep the go build line one plain command", s, c)
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// findGoBuild finds the RUN of the builder stage that runs `go build`, and splits it.
func findGoBuild(st stage, vars map[string]string) (*goBuild, error) {
	for _, in := range st.ins {
		if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		words, err := splitShell(in.args, vars)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", in.line, err)
		}
		gb := &goBuild{in: in}
		i := 0
		for ; i < len(words) && shellWord.MatchString(words[i]); i++ {
			gb.env = append(gb.env, words[i])
		}
		if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
			return nil, fmt.Errorf("line %d: want [NAME=value ...] go build ..., got %q", in.line, in.args)
		}
		gb.args = words[i+1:]
		for j, a := range gb.args {
			if a == "-o" && j+1 < len(gb.args) {
				gb.output = gb.args[j+1]
			}
		}
		return gb, nil
	}
	return nil, fmt.Errorf("no RUN ... go build in stage %q", st.name)
}

// dockerfileVars are the ARG values the check gives the go build line.
func dockerfileVars(version string) map[string]string {
	return map[string]string{"VERSION": version, "TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH}
}

// checkDockerfile returns what is wrong with a Dockerfile's stages.
func checkDockerfile(stages []stage) problems {
	var p problems
	if len(stages) < 2 {
		p.add("want a builder stage and a final stage, got %d stage(s)", len(stages))
		return p
	}
	builder, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(builder.image, "golang:1.26") {
		p.add("line %d: the builder is %s, want golang:1.26 (or a variant)", builder.from.line, builder.image)
	}
	if builder.name == "" {
		p.add("line %d: the builder stage has no name (FROM ... AS build)", builder.from.line)
	}
	if final.image != "scratch" {
		p.add("line %d: the final stage is FROM %s, want scratch: nothing but the binary", final.from.line, final.image)
	}
	gb, err := findGoBuild(builder, dockerfileVars("v"))
	if err != nil {
		p.add("%v", err)
	} else {
		if !slices.Contains(gb.env, "CGO_ENABLED=0") {
			p.add("line %d: go build without CGO_ENABLED=0: the binary would need a C library, which scratch has not", gb.in.line)
		}
		if !slices.Contains(gb.args, "-trimpath") {
			p.add("line %d: go build without -trimpath", gb.in.line)
		}
		if !slices.Contains(gb.args, "-buildvcs=false") {
			p.add("line %d: go build without -buildvcs=false: .dockerignore leaves .git out, so VCS stamping fails", gb.in.line)
		}
		if !slices.ContainsFunc(gb.args, func(a string) bool { return strings.Contains(a, "-X main.version=") }) {
			p.add("line %d: go build does not set main.version (-ldflags -X main.version=${VERSION})", gb.in.line)
		}
		if gb.output == "" || gb.args[len(gb.args)-1] != "./cmd/sidecar" {
			p.add("line %d: want go build ... -o PATH ./cmd/sidecar", gb.in.line)
		}
	}
	var user, entrypoint []instruction
	copies := map[string]string{} // destination → source, of COPY --from=builder
	var exposed []string
	for _, in := range final.ins {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			if flagValue(in.flags, "from") == builder.name && len(f) == 2 {
				copies[f[1]] = f[0]
			}
		case "USER":
			user = append(user, in)
		case "ENTRYPOINT":
			entrypoint = append(entrypoint, in)
		case "EXPOSE":
			for _, e := range strings.Fields(in.args) {
				exposed = append(exposed, strings.TrimSuffix(e, "/tcp"))
			}
		case "CMD":
			var v []string
			if json.Unmarshal([]byte(in.args), &v) != nil {
				p.add("line %d: CMD in shell form: the final stage has no shell", in.line)
			}
		case "LABEL", "ENV", "ARG", "WORKDIR", "STOPSIGNAL":
		default: // RUN, ADD, SHELL, HEALTHCHECK, ONBUILD, VOLUME
			p.add("line %d: %s in the final stage: it has no shell and should hold only the binary and its CA roots", in.line, in.cmd)
		}
	}
	if gb != nil && copies["/sidecar"] != gb.output {
		p.add("the final stage does not COPY --from=%s %s /sidecar (the binary go build writes)", builder.name, gb.output)
	}
	const ca = "/etc/ssl/certs/ca-certificates.crt"
	if copies[ca] != ca {
		p.add("the final stage does not COPY --from=%s %s %s", builder.name, ca, ca)
	}
	if len(user) == 0 {
		p.add("the final stage sets no USER: it would run as root")
	} else {
		u := user[len(user)-1]
		m := regexp.MustCompile(`^(\d+):(\d+)$`).FindStringSubmatch(u.args)
		if m == nil {
			p.add("line %d: USER %s: want numeric UID:GID, which Kubernetes' runAsNonRoot can verify", u.line, u.args)
		} else if m[1] == "0" || m[2] == "0" {
			p.add("line %d: USER %s is root", u.line, u.args)
		}
	}
	if len(entrypoint) != 1 {
		p.add("the final stage has %d ENTRYPOINTs, want one", len(entrypoint))
	} else {
		var v []string
		if err := json.Unmarshal([]byte(entrypoint[0].args), &v); err != nil {
			p.add("line %d: ENTRYPOINT must be in exec form (a JSON array): there is no shell", entrypoint[0].line)
		} else if !slices.Equal(v, []string{"/sidecar", "serve"}) {
			p.add("line %d: ENTRYPOINT %v, want [/sidecar serve]", entrypoint[0].line, v)
		}
	}
	for _, port := range []string{"7071", "9090"} {
		if !slices.Contains(exposed, port) {
			p.add("the final stage does not EXPOSE %s", port)
		}
	}
	return p
}

func readDockerfile(t testing.TB) []stage {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages, err := parseDockerfile(string(src))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return stages
}

func TestDockerfile(t *testing.T) {
	for _, pr := range checkDockerfile(readDockerfile(t)) {
		t.Errorf("Dockerfile: %s", pr)
	}
}

// TestDockerfileRulesCatch feeds checkDockerfile broken Dockerfiles.
func TestDockerfileRulesCatch(t *testing.T) {
	good := `FROM golang:1.26-bookworm AS build
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-X main.version=${VERSION}" -o /out/sidecar ./cmd/sidecar
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/sidecar /sidecar
USER 65532:65532
EXPOSE 7071 9090
ENTRYPOINT ["/sidecar", "serve"]
`
	cases := map[string]struct{ old, new, want string }{
		"good":              {"", "", ""},
		"RUN in final":      {"USER 65532", "RUN chmod +x /sidecar\nUSER 65532", "RUN in the final stage"},
		"root":              {"USER 65532:65532", "USER 0:0", "is root"},
		"named user":        {"USER 65532:65532", "USER nonroot", "want numeric UID:GID"},
		"shell entrypoint":  {`ENTRYPOINT ["/sidecar", "serve"]`, "ENTRYPOINT /sidecar serve", "exec form"},
		"alpine":            {"FROM scratch", "FROM alpine:3", "want scratch"},
		"cgo":               {"CGO_ENABLED=0 go build", "go build", "CGO_ENABLED=0"},
		"no trimpath":       {"-trimpath ", "", "-trimpath"},
		"binary elsewhere":  {"/out/sidecar /sidecar", "/out/sidecar /bin/sidecar", "does not COPY"},
		"no CA roots":       {"COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n", "", "ca-certificates.crt"},
		"admin not exposed": {"EXPOSE 7071 9090", "EXPOSE 7071", "EXPOSE 9090"},
		"chained build":     {"RUN CGO_ENABLED=0", "RUN go mod download && CGO_ENABLED=0", "shell syntax"},
	}
	for name, c := range cases {
		src := strings.Replace(good, c.old, c.new, 1)
		stages, err := parseDockerfile(src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := checkDockerfile(stages)
		if c.want == "" && len(got) > 0 || c.want != "" && !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, c.want) }) {
			t.Errorf("%s: want a problem with %q, got %q", name, c.want, got)
		}
	}
}

// The sidecar as the Dockerfile builds it, built once per test run.
var (
	sidecarOnce sync.Once
	sidecarBin  string
	sidecarErr  error
	sidecarDir  string
)

const checkVersion = "v0.0.0-manifests-check"

// dockerSidecar builds cmd/sidecar with the Dockerfile's own `go build` line (its
// variables: VERSION=checkVersion, the host's OS and architecture), in the repository's
// root, with no GOFLAGS (the golang image sets none), and returns the binary's path.
func dockerSidecar(t testing.TB) string {
	t.Helper()
	root := repoRoot(t)
	sidecarOnce.Do(func() {
		gb, err := findGoBuild(readDockerfile(t)[0], dockerfileVars(checkVersion))
		if err != nil {
			sidecarErr = err
			return
		}
		sidecarDir, err = os.MkdirTemp("", "fanout-manifests-check-")
		if err != nil {
			sidecarErr = err
			return
		}
		bin := filepath.Join(sidecarDir, "sidecar")
		args := slices.Clone(gb.args)
		for i := range args {
			if i > 0 && args[i-1] == "-o" {
				args[i] = bin
			}
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(withoutEnv(os.Environ(), "GOFLAGS", "CGO_ENABLED", "GOOS", "GOARCH"), "GOFLAGS=")
		cmd.Env = append(cmd.Env, gb.env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			sidecarErr = fmt.Errorf("%s go %s: %v\n%s", strings.Join(gb.env, " "), strings.Join(args, " "), err, out)
			return
		}
		sidecarBin = bin
	})
	if sidecarErr != nil {
		t.Fatalf("building the sidecar as the Dockerfile does: %v", sidecarErr)
	}
	return sidecarBin
}

func withoutEnv(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, name)
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sidecarDir != "" {
		os.RemoveAll(sidecarDir)
	}
	os.Exit(code)
}

// TestDockerBuildIsStatic builds the binary as the Dockerfile does and checks that it
// can run on scratch: an ELF without an interpreter (PT_INTERP) or a dynamic section,
// so no C library or loader is needed; and that VERSION reaches `sidecar version`.
func TestDockerBuildIsStatic(t *testing.T) {
	bin := dockerSidecar(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %v program header: it is dynamically linked and would not run on scratch", bin, p.Type)
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Errorf("%s has a .dynamic section", bin)
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs %v", bin, libs)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sidecar "+checkVersion+" ") {
		t.Errorf("sidecar version = %q (%v), want it to say %s, the Dockerfile's VERSION", out, err, checkVersion)
	}
	t.Logf("%s", out)
}

// TestDockerignore checks that .dockerignore leaves .git out, and hides no file the
// build reads: go.mod, go.sum, and the directories of the module's packages that
// cmd/sidecar imports (as `go list -deps` finds them for the image's platform).
func TestDockerignore(t *testing.T) {
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}} {{.Dir}}", "./cmd/sidecar")
	cmd.Dir = root
	cmd.Env = append(withoutEnv(os.Environ(), "GOFLAGS", "CGO_ENABLED"), "GOFLAGS=", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		mod, dir, _ := strings.Cut(l, " ")
		if mod == "github.com/fanout/fanout" {
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				t.Fatal(err)
			}
			needed = append(needed, filepath.ToSlash(rel))
		}
	}
	if len(needed) < 3 {
		t.Fatalf("go list found no package of the module: %s", out)
	}
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if !regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`).MatchString(l) || strings.HasPrefix(l, "..") {
			t.Errorf(".dockerignore: %q: keep to plain relative paths (no wildcards, no !), so that this check can tell what they hide", l)
			continue
		}
		patterns = append(patterns, l)
		for _, n := range needed {
			if n == l || strings.HasPrefix(n, l+"/") {
				t.Errorf(".dockerignore: %q hides %s, which go build ./cmd/sidecar reads", l, n)
			}
		}
	}
	if !slices.Contains(patterns, ".git") {
		t.Errorf(".dockerignore does not leave out .git")
	}
}
