package audit

import (
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"idemlab/internal/audit/digest"
)

// ProtocolDir is the checkout's package of the protocol constants, which
// the audit reads with go/parser and go/constant (not an import).
const ProtocolDir = "internal/protocol"

// protocolFields maps manifest.protocol's fields to the constants of
// ProtocolDir (ms: a time.Duration, recorded in milliseconds).
var protocolFields = []struct {
	field, constant string
	ms              bool
}{
	{"key_header", "KeyHeader", false},
	{"replayed_header", "ReplayedHeader", false},
	{"fault_header", "FaultHeader", false},
	{"key_pattern", "KeyPattern", false},
	{"default_body", "DefaultBody", false},
	{"capacity", "DefaultCapacity", false},
	{"max_body", "DefaultMaxBody", false},
	{"wait_ms", "DefaultWait", true},
	{"slow_ms", "SlowDelay", true},
	{"crash_exit_code", "CrashExitCode", false},
	{"client_timeout_ms", "DefaultClientTimeout", true},
}

// ownProtocol is the audit's own copy of the constants its other checks
// rely on (the reply texts' headers, the default body, the key syntax).
var ownProtocol = map[string]string{
	"key_header": `"` + keyHeader + `"`, "fault_header": `"` + faultHeader + `"`,
	"replayed_header": `"Idempotency-Replayed"`, "key_pattern": render(keyPattern), "default_body": render(defaultBody),
}

// effectPath is the one path the server serves (the audit's own copy).
const effectPath = "/effect"

var (
	goVersion = regexp.MustCompile(`^go1\.[0-9]{1,3}(\.[0-9]{1,3})?((rc|beta)[0-9]{1,2})?$`)
	osArch    = regexp.MustCompile(`^(aix|android|darwin|dragonfly|freebsd|illumos|ios|js|linux|netbsd|openbsd|plan9|solaris|wasip1|windows)/` +
		`(386|amd64|arm|arm64|loong64|mips|mips64|mips64le|mipsle|ppc64|ppc64le|riscv64|s390x|wasm)$`)
	pgVersion = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?( |$)`)
	generated = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$`)
)

// checkManifest checks every manifest field the other checks do not:
// generated_utc, go_version, os_arch and postgres_version look like what
// they claim; source_dirty fails unless -allow-dirty, unsafe_registry
// unless -allow-mutation; then the protocol, the commit and the build.
func (a *auditor) checkManifest() {
	m := a.manifest
	fail := a.manifestFail
	a.check()
	if s, ok := str(m, "generated_utc"); ok && !generated.MatchString(s) || !validTime(s) {
		fail("generated_utc", "%q is not a UTC time (YYYY-MM-DDTHH:MM:SSZ)", s)
	}
	a.check()
	if s, ok := str(m, "go_version"); ok && !goVersion.MatchString(s) {
		fail("go_version", "%q is not a Go release (go1.N or go1.N.P)", s)
	}
	a.check()
	if s, ok := str(m, "os_arch"); ok && !osArch.MatchString(s) {
		fail("os_arch", "%q is not a GOOS/GOARCH pair", s)
	}
	a.check()
	if dirty, _ := m["source_dirty"].(bool); dirty {
		a.report.SourceDirty = true
		if a.opts.AllowDirty {
			a.note("the evidence came from a checkout with uncommitted changes (manifest.json source_dirty: true), accepted with -allow-dirty")
			a.report.Subset = append(a.report.Subset, "dirty tree accepted (-allow-dirty)")
		} else {
			fail("source_dirty", "true: the evidence came from a checkout with uncommitted changes (pass -allow-dirty to accept it)")
		}
	}
	a.check()
	if u, ok := m["unsafe_registry"]; ok {
		if a.opts.AllowMutation {
			a.note(fmt.Sprintf("mutation run: every server ran the deliberately broken registry %s (accepted with -allow-mutation)", render(u)))
			a.report.Subset = append(a.report.Subset, "mutation run "+render(u)+" (-allow-mutation)")
		} else {
			fail("unsafe_registry", "%s: mutation run, not reference evidence (pass -allow-mutation to audit it as one)", render(u))
		}
	}
	a.check()
	pg, hasPG := str(m, "postgres_version")
	switch ranPG := slices.Contains(a.selected("stores"), "postgres"); {
	case hasPG && !ranPG:
		fail("postgres_version", "present, but selection.stores names no postgres")
	case !hasPG && ranPG:
		fail("postgres_version", "absent, but selection.stores names postgres")
	case hasPG && !pgVersion.MatchString(pg):
		fail("postgres_version", "%q does not start with a PostgreSQL version (N.N)", pg)
	}
	a.checkProtocol()
	a.checkCommit()
	a.checkServerBuild()
}

// manifestFail records a failed check of manifest.json's field.
func (a *auditor) manifestFail(field, format string, args ...any) {
	a.fail(Failure{Check: CheckManifest, Field: field, Message: "manifest.json: " + field + ": " + fmt.Sprintf(format, args...)})
}

// checkProtocol compares manifest.protocol with ProtocolDir and ownProtocol.
func (a *auditor) checkProtocol() {
	proto, _ := a.manifest["protocol"].(map[string]any)
	consts, err := readConstants(a.opts.Root, ProtocolDir)
	if err != nil {
		a.failf(CheckManifest, "%s: %v: manifest.protocol was not checked against it", ProtocolDir, err)
		consts = map[string]constant.Value{}
	}
	for _, f := range protocolFields {
		a.check()
		got := render(proto[f.field])
		if own, ok := ownProtocol[f.field]; ok && got != own {
			a.fail(Failure{Check: CheckManifest, Field: "protocol." + f.field, Expected: own, Observed: got,
				Message: fmt.Sprintf("manifest.json: protocol.%s: expected %s (the audit's own copy), observed %s", f.field, own, got)})
			continue
		}
		v, ok := consts[f.constant]
		if _, own := ownProtocol[f.field]; !ok && own {
			continue // checked against the audit's own copy
		}
		if !ok {
			if err == nil {
				a.failf(CheckManifest, "%s: no constant %s: manifest.json protocol.%s was not checked", ProtocolDir, f.constant, f.field)
			}
			continue
		}
		want := v.ExactString()
		if f.ms {
			ns, exact := constant.Int64Val(v)
			if !exact || ns%int64(time.Millisecond) != 0 {
				a.failf(CheckManifest, "%s: %s is not a whole number of milliseconds", ProtocolDir, f.constant)
				continue
			}
			want = fmt.Sprint(ns / int64(time.Millisecond))
		}
		if got != want {
			a.fail(Failure{Check: CheckManifest, Field: "protocol." + f.field, Expected: want, Observed: got,
				Message: fmt.Sprintf("manifest.json: protocol.%s: expected %s (%s in %s), observed %s", f.field, want, f.constant, ProtocolDir, got)})
		}
	}
	a.check()
	if v, ok := consts["EffectPath"]; ok && v.ExactString() != render(effectPath) {
		a.failf(CheckManifest, "%s: EffectPath is %s, the audit's own copy %q", ProtocolDir, v.ExactString(), effectPath)
	}
	if p, ok := proto["effect_path"]; ok && render(p) != render(effectPath) {
		a.failf(CheckManifest, "manifest.json: protocol.effect_path: expected %q, observed %s", effectPath, render(p))
	}
	if err == nil {
		a.claim("protocol")
	}
}

// readConstants returns the package-level constants of the non-test Go
// files in root/dir, evaluated exactly. Constants it cannot evaluate (iota,
// calls) are left out.
func readConstants(root, dir string) (map[string]constant.Value, error) {
	files, err := digest.SourceFiles(root)
	var refused *digest.RefusedError
	if err != nil && !errors.As(err, &refused) {
		return nil, err
	}
	fset := token.NewFileSet()
	var decls []*ast.ValueSpec
	n := 0
	for _, f := range files {
		if !strings.HasPrefix(f, dir+"/") || strings.Contains(strings.TrimPrefix(f, dir+"/"), "/") || !strings.HasSuffix(f, ".go") {
			continue
		}
		data, err := readInside(root, f, CapSource)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", f, unwrapPath(err))
		}
		af, err := parser.ParseFile(fset, f, data, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		n++
		for _, d := range af.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					decls = append(decls, s.(*ast.ValueSpec))
				}
			}
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("no Go files")
	}
	out := map[string]constant.Value{}
	// Constants may refer to ones declared later or in another file:
	// evaluate until nothing new resolves.
	for changed := true; changed; {
		changed = false
		for _, s := range decls {
			for i, name := range s.Names {
				if _, done := out[name.Name]; done || i >= len(s.Values) {
					continue
				}
				if v := evalConst(s.Values[i], out); v != nil {
					out[name.Name] = v
					changed = true
				}
			}
		}
	}
	return out, nil
}

// durations are the time package's unit constants, in nanoseconds.
var durations = map[string]int64{
	"Nanosecond": 1, "Microsecond": 1e3, "Millisecond": 1e6, "Second": 1e9, "Minute": 60e9, "Hour": 3600e9,
}

// evalConst evaluates a constant expression, nil if it cannot.
func evalConst(e ast.Expr, env map[string]constant.Value) constant.Value {
	switch e := e.(type) {
	case *ast.BasicLit:
		v := constant.MakeFromLiteral(e.Value, e.Kind, 0)
		if v.Kind() == constant.Unknown {
			return nil
		}
		return v
	case *ast.Ident:
		return env[e.Name]
	case *ast.ParenExpr:
		return evalConst(e.X, env)
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
			if ns, ok := durations[e.Sel.Name]; ok {
				return constant.MakeInt64(ns)
			}
		}
	case *ast.CallExpr: // a conversion such as time.Duration(5)
		if len(e.Args) == 1 {
			return evalConst(e.Args[0], env)
		}
	case *ast.UnaryExpr:
		if x := evalConst(e.X, env); x != nil && (e.Op == token.SUB || e.Op == token.ADD) {
			return constant.UnaryOp(e.Op, x, 0)
		}
	case *ast.BinaryExpr:
		x, y := evalConst(e.X, env), evalConst(e.Y, env)
		if x == nil || y == nil {
			return nil
		}
		switch e.Op {
		case token.ADD, token.SUB, token.MUL:
			if x.Kind() == y.Kind() || x.Kind() != constant.String && y.Kind() != constant.String {
				return constant.BinaryOp(x, e.Op, y)
			}
		case token.QUO:
			if x.Kind() == constant.Int && y.Kind() == constant.Int && constant.Sign(y) != 0 {
				return constant.BinaryOp(x, token.QUO_ASSIGN, y)
			}
		}
	}
	return nil
}

// checkServerBuild checks manifest.server_build and, with -rebuild,
// server_sha256 against a rebuild from the checkout.
func (a *auditor) checkServerBuild() {
	a.check()
	sb, ok := a.manifest["server_build"].(map[string]any)
	prebuilt, _ := sb["prebuilt"].(bool)
	if !ok {
		a.note("manifest.json has no server_build: the server's build flags were not recorded (evidence from before the runner pinned them)")
	} else {
		for _, f := range []struct {
			field string
			want  []string
		}{{"flags", PinnedBuildFlags}, {"env", PinnedBuildEnv}} {
			got := stringList(sb, f.field)
			if prebuilt && len(got) == 0 {
				continue // a prebuilt binary's recipe is unknown
			}
			if !slices.Equal(got, f.want) {
				a.failf(CheckManifest, "manifest.json: server_build.%s: expected %s (the pinned build), observed %s",
					f.field, render(toAny(f.want)), render(toAny(got)))
			}
		}
		if p, _ := str(sb, "package"); p != ServerPackage {
			a.failf(CheckManifest, "manifest.json: server_build.package: expected %q, observed %q", ServerPackage, p)
		}
	}
	want, _ := str(a.manifest, "server_sha256")
	if !a.opts.Rebuild {
		if prebuilt {
			a.failf(CheckManifest, "manifest.json: server_build.prebuilt: true: the server was not built from the checkout (runner -server); only -rebuild can show its hash is the checkout's")
		} else {
			a.note("server_sha256 not checked: pass -rebuild to rebuild cmd/effectserver and compare")
		}
		return
	}
	goVer, _ := str(a.manifest, "go_version")
	osArch, _ := str(a.manifest, "os_arch")
	got, local, err := rebuildServer(a.opts.Root, osArch)
	a.check()
	switch {
	case err != nil:
		a.failf(CheckManifest, "-rebuild: %v", err)
	case got == want && local != goVer:
		a.failf(CheckManifest, "manifest.json: go_version: %s, but the server rebuilds byte for byte with %s (the Go version is part of the binary)", goVer, local)
	case got == want:
		a.note("server_sha256 reproduced by -rebuild (" + local + ", " + osArch + ")")
		a.claim("rebuild")
	case local != goVer:
		a.failf(CheckManifest, "manifest.json: server_sha256: the rebuild differs, and the local Go is %s, not the manifest's %s: rebuild with %s to check it", local, goVer, goVer)
	case !ok:
		a.failf(CheckManifest, "manifest.json: server_sha256: does not match a rebuild with the pinned flags (the manifest records no server_build: the server was built with unrecorded flags)")
	default:
		a.failf(CheckManifest, "manifest.json: server_sha256: does not match a rebuild of %s from the checkout with the recorded flags", ServerPackage)
	}
}

// The pinned build of the effect server (go build FLAGS -o OUT PACKAGE,
// ENV added), as the runner records it in manifest.server_build and
// -rebuild runs it. -trimpath and -buildvcs=false keep the checkout's path
// and git state out of the binary, CGO_ENABLED=0 the C toolchain, GOWORK=off
// a workspace; GOFLAGS=-mod=readonly replaces the user's (an empty one
// would be read from the go env file). -rebuild also sets GOENV=off (no
// GOAMD64 or GOEXPERIMENT from that file) and GOTOOLCHAIN=local.
var (
	ServerPackage    = "./cmd/effectserver"
	PinnedBuildFlags = []string{"-trimpath", "-buildvcs=false"}
	PinnedBuildEnv   = []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off"}
)

// rebuildServer builds ServerPackage from root, pinned, for osArch and
// returns the binary's SHA-256 and the local Go version (remembered).
func rebuildServer(root, osArch string) (sum, goVersion string, err error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", "", err
	}
	r, err := remember(abs+"\x00rebuild\x00"+osArch, func() ([2]string, error) {
		goos, goarch, ok := strings.Cut(osArch, "/")
		if !ok {
			return [2]string{}, fmt.Errorf("os_arch %q: not GOOS/GOARCH", osArch)
		}
		env := pinnedEnv("GOOS="+goos, "GOARCH="+goarch)
		ver := exec.Command("go", "env", "GOVERSION")
		ver.Dir, ver.Env = abs, env
		out, err := ver.Output()
		if err != nil {
			return [2]string{}, fmt.Errorf("go env GOVERSION: %v", err)
		}
		goVersion := strings.TrimSpace(string(out))
		tmp, err := os.MkdirTemp("", "audit-rebuild")
		if err != nil {
			return [2]string{}, err
		}
		defer os.RemoveAll(tmp)
		args := pinnedBuildArgs(filepath.Join(tmp, "effectserver"), ServerPackage)
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = abs, env
		if out, err := cmd.CombinedOutput(); err != nil {
			err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
			return [2]string{"", goVersion}, err
		}
		sum, err := hashInside(tmp, "effectserver", 1<<30)
		return [2]string{sum, goVersion}, err
	})
	return r[0], r[1], err
}

// pinnedEnv is the environment of a pinned build: PinnedBuildEnv and
// extra added, then GOTOOLCHAIN=local and GOENV=off.
func pinnedEnv(extra ...string) []string {
	return slices.Concat(os.Environ(), PinnedBuildEnv, extra, []string{"GOTOOLCHAIN=local", "GOENV=off"})
}

// pinnedBuildArgs are go's arguments to build pkg into bin, pinned.
func pinnedBuildArgs(bin, pkg string) []string {
	return slices.Concat([]string{"build"}, PinnedBuildFlags, []string{"-o", bin, pkg})
}
