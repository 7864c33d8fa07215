//go:build linux

package chaos

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sockOwner says which of pids holds the client end of c, a loopback TCP
// connection this process accepted, or -1: the socket whose local address
// is c's remote one and whose remote address is c's local one, found in
// /proc/net/tcp, then among each pid's open files.
func sockOwner(c net.Conn, pids []int) int {
	client, err1 := netip.ParseAddrPort(c.RemoteAddr().String())
	server, err2 := netip.ParseAddrPort(c.LocalAddr().String())
	if err1 != nil || err2 != nil || !client.Addr().Is4() {
		return -1
	}
	inode, ok := tcpInode(client, server)
	if !ok {
		return -1
	}
	want := fmt.Sprintf("socket:[%s]", inode)
	for _, pid := range pids {
		fds := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		ents, err := os.ReadDir(fds)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && l == want {
				return pid
			}
		}
	}
	return -1
}

// tcpInode is the inode of the IPv4 TCP socket from local to remote.
func tcpInode(local, remote netip.AddrPort) (string, bool) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", false
	}
	defer func() { _ = f.Close() }()
	l, r := procAddr(local), procAddr(remote)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && fields[1] == l && fields[2] == r {
			return fields[9], true
		}
	}
	return "", false
}

// procAddr writes an address as /proc/net/tcp does: the IPv4 address as a
// host-order 32-bit number, then the port, both in upper-case hex.
func procAddr(a netip.AddrPort) string {
	ip := a.Addr().As4()
	return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip[:]), a.Port())
}
