// Package pgcluster runs a throwaway PostgreSQL cluster for the lab:
// initdb into a fresh temporary folder (or a copy of its kept output,
// pristine.go), the server listening only on a unix socket there, one
// database per run copied from a template, and the server stopped and the
// folder removed on every path. As root, initdb and postgres run as the
// OS user postgres (initdb refuses root).
//
// # No postgres outlives the runner
//
// pg_ctl daemonizes the postmaster, which would survive a runner killed
// with SIGKILL, so the cluster runs postgres directly as a child with a
// parent-death signal (SIGQUIT: immediate shutdown) and its own process
// group (a Ctrl-C reaches the runner, which stops the server in order).
// The parent-death signal fires when the forking thread ends, not the
// process (go.dev/issue/27505), so the child is started from a goroutine
// locked to its thread until the child exits. The next Start removes the
// folders of clusters whose owner and postmaster are both gone.
//
// The server keeps fsync and synchronous_commit on, as any PostgreSQL the
// lab's durability claims rest on must (only initdb runs --no-sync).
//
// # Databases
//
// TemplateDB is empty: the store creates its tables at open, as it must on
// a server the lab did not start (runner -pg-dsn), so this package does
// not depend on the store's layout. It allows no connections, so runs can
// copy it concurrently (CREATE DATABASE refuses a template in use).
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Superuser is the database superuser initdb creates; clients connect as it.
const Superuser = "postgres"

// TemplateDB is the empty database CreateDatabase copies.
const TemplateDB = "idemlab_template"

// Port only names the socket file: there is no TCP listener.
const Port = 5432

// folderPrefix starts the name of every cluster folder in the temp folder.
const folderPrefix = "idemlab-pg-"

// maxSocketPath is the longest unix socket path Linux accepts.
const maxSocketPath = 107

// Bounds on shutdown: fast shutdown, then immediate shutdown, then SIGKILL.
const (
	fastShutdown      = 30 * time.Second
	immediateShutdown = 10 * time.Second
	killWait          = 10 * time.Second
)

// Options configure Start. The zero value is ready to use.
type Options struct {
	BinDir      string            // initdb and postgres; "" finds them (FindBinDir)
	TempDir     string            // where the cluster's folder is made; "" is os.TempDir()
	OSUser      string            // runs PostgreSQL when this process is root; "" is "postgres"
	Settings    map[string]string // extra postgres -c settings; the socket and durability ones cannot be overridden
	ReadyWithin time.Duration     // bounds initdb, start and template together; 0 is 2 minutes
}

// A Cluster is a running PostgreSQL started by Start, safe for concurrent
// use.
type Cluster struct {
	Dir             string // data, socket, logs; gone after Stop
	BinDir          string
	Version         string // SHOW server_version, for manifests
	PID             int    // the postmaster's
	InitIn, ReadyIn time.Duration
	InitCopied      bool // the data folder is a copy of a kept initdb output (pristine.go)

	cmd    *exec.Cmd
	exited chan struct{} // closed once the postmaster has exited and been reaped
	admin  *pgxpool.Pool

	stopOnce sync.Once
	stopErr  error
}

// Start makes a cluster: a folder, initdb, the server, the template. When
// it fails it has removed everything it made; missing programs wrap
// ErrNotInstalled.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	if opt.ReadyWithin <= 0 {
		opt.ReadyWithin = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opt.ReadyWithin)
	defer cancel()
	bin := opt.BinDir
	if bin == "" {
		var err error
		if bin, err = FindBinDir(); err != nil {
			return nil, fmt.Errorf("start postgres: %w", err)
		}
	} else if !hasServer(bin) {
		return nil, fmt.Errorf("start postgres: %w (not in %s)", ErrNotInstalled, bin)
	}
	parent := opt.TempDir
	if parent == "" {
		parent = os.TempDir()
	}
	sweep(parent)
	cred, err := credential(opt.OSUser)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	dir, err := os.MkdirTemp(parent, folderPrefix)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c := &Cluster{Dir: dir, BinDir: bin}
	if err := c.start(ctx, cred, opt.Settings); err != nil {
		c.Stop()
		return nil, fmt.Errorf("start postgres in %s: %w", dir, err)
	}
	return c, nil
}

// credential returns whom to run PostgreSQL as: nil unless this process is
// root, then the unprivileged name.
func credential(name string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root, initdb needs an unprivileged OS user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("OS user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("OS user %s: gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("OS user %s is root; initdb refuses it", name)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func (c *Cluster) start(ctx context.Context, cred *syscall.Credential, settings map[string]string) error {
	if n := len(c.socketPath()); n > maxSocketPath {
		return fmt.Errorf("socket path %s is %d bytes, longer than the %d a unix socket allows (set a shorter TMPDIR)", c.socketPath(), n, maxSocketPath)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "owner"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(c.Dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(c.Dir, "data")

	began := time.Now()
	initdbArgs := []string{"-U", Superuser, "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"}
	kept := pristineDir(pristineKey(c.BinDir, initdbArgs))
	if c.InitCopied = fromPristine(kept, data, cred); !c.InitCopied {
		initdb := c.command(cred, "initdb", append([]string{"-D", data}, initdbArgs...)...)
		if err := c.runToEnd(ctx, initdb, "initdb.log"); err != nil {
			return err
		}
		keepPristine(kept, data)
	}
	c.InitIn = time.Since(began)

	began = time.Now()
	args := []string{"-D", data}
	for _, kv := range serverSettings(c.Dir, settings) {
		args = append(args, "-c", kv)
	}
	c.cmd = c.command(cred, "postgres", args...)
	logFile, err := os.Create(filepath.Join(c.Dir, "postgres.log"))
	if err != nil {
		return err
	}
	defer logFile.Close() // the child holds its own copy
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	c.cmd.SysProcAttr = procAttr(cred, syscall.SIGQUIT)
	c.exited = make(chan struct{})
	if err := startLocked(c.cmd, func(error) { close(c.exited) }); err != nil {
		c.cmd = nil
		return fmt.Errorf("start postgres: %w", err)
	}
	c.PID = c.cmd.Process.Pid
	if err := c.awaitReady(ctx); err != nil {
		return err
	}
	c.ReadyIn = time.Since(began)
	return nil
}

// serverSettings returns the server's -c settings: the socket in dir and
// durable commits, then the caller's extras, which cannot override them.
func serverSettings(dir string, extra map[string]string) []string {
	fixed := [][2]string{
		{"listen_addresses", ""},
		{"unix_socket_directories", dir},
		{"port", strconv.Itoa(Port)},
		{"fsync", "on"},
		{"synchronous_commit", "on"},
		{"full_page_writes", "on"},
		{"max_connections", "200"},
	}
	var kv []string
	seen := map[string]bool{}
	for _, f := range fixed {
		kv = append(kv, f[0]+"="+f[1])
		seen[f[0]] = true
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if seen[k] && k != "max_connections" {
			continue
		}
		kv = append(kv, k+"="+extra[k])
	}
	return kv
}

// command runs the named program as cred, without the environment's PG*
// variables (PGPORT and PGDATA would change what the server does).
func (c *Cluster) command(cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.BinDir, name), args...)
	cmd.Dir = c.Dir
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PG") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	cmd.SysProcAttr = procAttr(cred, syscall.SIGKILL)
	return cmd
}

// runToEnd runs cmd to its end with its output in the folder's logName,
// killing it if ctx ends first. A failure carries the log's tail.
func (c *Cluster) runToEnd(ctx context.Context, cmd *exec.Cmd, logName string) error {
	logPath := filepath.Join(c.Dir, logName)
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	done := make(chan error, 1)
	if err := startLocked(cmd, func(err error) { done <- err }); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(cmd.Path), err)
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%s: %w%s", filepath.Base(cmd.Path), err, tail(logPath))
	}
	return nil
}

// startLocked starts cmd from a goroutine locked to its OS thread, held
// until Wait returns and then passed to exited: Linux sends the
// parent-death signal when the forking thread ends, and Go may end an
// idle thread.
func startLocked(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}

// awaitReady waits until the server accepts connections, then opens the
// admin pool, reads the version and creates the template.
func (c *Cluster) awaitReady(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(c.DSN("postgres"))
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	for {
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err == nil {
			err = conn.QueryRow(ctx, `SHOW server_version`).Scan(&c.Version)
			conn.Close(context.Background())
			if err != nil {
				return fmt.Errorf("read server version: %w", err)
			}
			break
		}
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited before accepting connections (%v)%s", c.cmd.ProcessState, tail(filepath.Join(c.Dir, "postgres.log")))
		case <-ctx.Done():
			return fmt.Errorf("postgres not accepting connections: %w (last: %v)%s", ctx.Err(), err, tail(filepath.Join(c.Dir, "postgres.log")))
		case <-time.After(10 * time.Millisecond):
		}
	}
	if c.admin, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fmt.Errorf("admin connection: %w", err)
	}
	q := `CREATE DATABASE ` + TemplateDB + ` TEMPLATE template0 IS_TEMPLATE true ALLOW_CONNECTIONS false`
	if _, err := c.admin.Exec(ctx, q); err != nil {
		return fmt.Errorf("create template: %w", err)
	}
	return nil
}

// socketPath is where the server's socket lives.
func (c *Cluster) socketPath() string {
	return filepath.Join(c.Dir, ".s.PGSQL."+strconv.Itoa(Port))
}

// DSN returns the URL of database db: the socket, the superuser, no
// password (the cluster trusts local connections).
func (c *Cluster) DSN(db string) string {
	q := url.Values{}
	q.Set("host", c.Dir)
	q.Set("port", strconv.Itoa(Port))
	q.Set("sslmode", "disable")
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + db, RawQuery: q.Encode()}
	return u.String()
}

// CreateDatabase copies TemplateDB to database name and returns its DSN.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (dsn string, err error) {
	if c.admin == nil {
		return "", errors.New("create database: cluster not running")
	}
	q := `CREATE DATABASE ` + pgx.Identifier{name}.Sanitize() + ` TEMPLATE ` + TemplateDB
	if _, err := c.admin.Exec(ctx, q); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return c.DSN(name), nil
}

// DropDatabase drops database name, if any, ending its connections first.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	if c.admin == nil {
		return errors.New("drop database: cluster not running")
	}
	q := `DROP DATABASE IF EXISTS ` + pgx.Identifier{name}.Sanitize() + ` WITH (FORCE)`
	if _, err := c.admin.Exec(ctx, q); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// Stop stops the server (fast shutdown, then immediate, then SIGKILL),
// reaps it and removes the folder; later calls return the first's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	if c.admin != nil {
		c.admin.Close()
	}
	if c.cmd != nil {
		if err := c.signalUntilExit(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop postgres in %s: %w", c.Dir, err)
	}
	return nil
}

// signalUntilExit signals the postmaster harder at each bound until it
// exits; needing more than fast shutdown is reported.
func (c *Cluster) signalUntilExit() error {
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, fastShutdown}, {syscall.SIGQUIT, immediateShutdown}, {syscall.SIGKILL, killWait}}
	for i, s := range steps {
		c.cmd.Process.Signal(s.sig) // fails harmlessly once it has exited
		select {
		case <-c.exited:
			if i == 0 {
				return nil
			}
			return fmt.Errorf("postgres did not stop within %v of fast shutdown; stopped with %v", fastShutdown, s.sig)
		case <-time.After(s.wait):
		}
	}
	return fmt.Errorf("postgres (pid %d) still running after SIGKILL", c.PID)
}

// sweep removes the folders dead runners left in parent, only when their
// owner and postmaster are both gone; anything unclear is kept.
func sweep(parent string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, folderPrefix+"*"))
	for _, dir := range dirs {
		owner, ok := pidIn(filepath.Join(dir, "owner"))
		if !ok || owner == os.Getpid() || alive(owner) {
			continue
		}
		pm, ok := pidIn(filepath.Join(dir, "data", "postmaster.pid"))
		if ok && alive(pm) {
			continue
		}
		if !ok {
			if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
		}
		os.RemoveAll(dir)
	}
}

// pidIn reads the process ID on the first line of file.
func pidIn(file string) (int, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	return pid, err == nil && pid > 0
}

// alive reports whether process pid may exist.
func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// tail returns the last lines of a log file, indented, for an error.
func tail(file string) string {
	b, err := os.ReadFile(file)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\n\t" + strings.Join(lines, "\n\t")
}

// ServerVersion returns Version.
func (c *Cluster) ServerVersion() string { return c.Version }
