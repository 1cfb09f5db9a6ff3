package serverproc

import (
	"encoding/binary"
	"net"
	"strconv"
	"syscall"
)

// listeningInodes returns the inodes of the TCP sockets a connection to
// 127.0.0.1:port can reach: listening on 127.0.0.1 or 0.0.0.0, or on
// IPv6's :: (dual-stack) or ::ffff:127.0.0.1; nil where it cannot tell. It
// asks the kernel's socket diagnostics (netlink, NETLINK_SOCK_DIAG) for
// listening sockets alone: /proc/net/tcp lists every connection, and a
// run of the lab leaves tens of thousands in TIME_WAIT (its clients never
// reuse one), each read costing the more.
func listeningInodes(port int) map[string]bool {
	inodes := map[string]bool{}
	for _, family := range []uint8{syscall.AF_INET, syscall.AF_INET6} {
		if err := dumpListening(family, port, inodes); err != nil {
			return nil
		}
	}
	return inodes
}

// Socket diagnostics' numbers (linux/sock_diag.h, linux/inet_diag.h).
const (
	netlinkSockDiag   = 4  // NETLINK_SOCK_DIAG
	sockDiagByFamily  = 20 // SOCK_DIAG_BY_FAMILY
	tcpListenState    = 10 // TCP_LISTEN
	inetDiagReqLen    = 56 // struct inet_diag_req_v2
	inetDiagMsgInode  = 68 // the inode's offset in struct inet_diag_msg
	inetDiagMsgSport  = 4  // id.idiag_sport's, big-endian
	inetDiagMsgSrc    = 8  // id.idiag_src's: 4 bytes of IPv4, or 16 of IPv6
	inetDiagMsgMinLen = 72
)

// dumpListening adds to inodes those of family's listening TCP sockets on
// port.
func dumpListening(family uint8, port int, inodes map[string]bool) error {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkSockDiag)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	req := make([]byte, syscall.NLMSG_HDRLEN+inetDiagReqLen)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(req[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], 1) // sequence
	body := req[syscall.NLMSG_HDRLEN:]
	body[0], body[1] = family, syscall.IPPROTO_TCP
	binary.NativeEndian.PutUint32(body[4:], 1<<tcpListenState)
	if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case syscall.NLMSG_DONE:
				return nil
			case syscall.NLMSG_ERROR:
				return syscall.EINVAL
			}
			if len(m.Data) < inetDiagMsgMinLen || int(binary.BigEndian.Uint16(m.Data[inetDiagMsgSport:])) != port ||
				!reachesLoopback(family, m.Data[inetDiagMsgSrc:inetDiagMsgSrc+16]) {
				continue
			}
			inodes[strconv.FormatUint(uint64(binary.NativeEndian.Uint32(m.Data[inetDiagMsgInode:])), 10)] = true
		}
	}
}

// reachesLoopback reports whether a socket of family listening at src
// takes a connection to 127.0.0.1.
func reachesLoopback(family uint8, src []byte) bool {
	if family == syscall.AF_INET {
		ip := net.IP(src[:4])
		return ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv4zero)
	}
	ip := net.IP(src)
	return ip.Equal(net.IPv6unspecified) || ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv4zero)
}
