package serverproc

import "net"

// FreePort asks the kernel for a free loopback port, for a server to be
// told to listen on (Spec.Addr). Another process may take it before the
// server binds it; the server then fails to start and says so.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
