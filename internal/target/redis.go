package target

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"idemlab/internal/serverproc"
)

// RedisProgram is the redis server the lab starts; RedisHint how to get it.
const (
	RedisProgram = "redis-server"
	RedisHint    = "install Debian's redis-server package"
)

// Bounds of a redis start and stop.
const (
	redisReadyWithin = 10 * time.Second
	redisStopWithin  = 5 * time.Second
)

// A RedisServer is one running redis-server, a side service a target
// needs: on a loopback port in a temporary folder, without persistence.
type RedisServer struct {
	URL  string // redis://127.0.0.1:PORT/0
	Addr string
	dir  string
	srv  *serverproc.Server
}

// redisReady is the line redis-server logs once it listens: the port it
// was told is then its own. A TCP probe could not tell: the free port
// FreePort found may be taken by another process before redis binds it
// (a client's ephemeral port, another run's server), and a probe would
// reach that process.
var redisReady = regexp.MustCompile(`Ready to accept connections`)

// redisTries bounds the ports StartRedis tries: a redis whose port was
// taken exits at once, and is started again on another.
const redisTries = 3

// StartRedis starts a redis-server in a fresh folder under parent, on a free
// loopback port, without persistence: its keys live as long as the process,
// which dies with the runner.
func StartRedis(ctx context.Context, parent string) (*RedisServer, error) {
	path, err := exec.LookPath(RedisProgram)
	if err != nil {
		return nil, fmt.Errorf("start redis: %w (%s)", err, RedisHint)
	}
	dir, err := os.MkdirTemp(parent, "redis-")
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	for try := 1; ; try++ {
		port, err := serverproc.FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("start redis: %w", err)
		}
		r, err := startRedisOnce(ctx, path, dir, port)
		if err == nil {
			return r, nil
		}
		if try == redisTries || ctx.Err() != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("start redis (%d tries, each on another free port): %w", try, err)
		}
	}
}

// startRedisOnce starts redis-server in dir on port.
func startRedisOnce(ctx context.Context, path, dir string, port int) (*RedisServer, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no",
		"--logfile", "", "--unixsocket", "", "--databases", "1"}
	srv, err := serverproc.StartSpec(ctx, serverproc.Spec{Path: path, Args: args, Dir: dir, Addr: addr, ReadyLine: redisReady,
		ReadyWithin: redisReadyWithin, Group: true})
	if err != nil {
		return nil, err
	}
	return &RedisServer{URL: "redis://" + addr + "/0", Addr: addr, dir: dir, srv: srv}, nil
}

// Stop stops redis and removes its folder; it is safe to call twice.
func (r *RedisServer) Stop() error {
	if r.srv == nil {
		return nil
	}
	_, err := r.srv.Stop(redisStopWithin)
	r.srv = nil
	if rerr := os.RemoveAll(r.dir); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("stop redis %s: %w", r.Addr, err)
	}
	return nil
}
