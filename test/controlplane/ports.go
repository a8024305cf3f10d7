package controlplane

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The plane's ports are chosen before its processes bind them, seconds
// later. A port the kernel hands out for "127.0.0.1:0" comes from its
// ephemeral range, the same range outgoing connections take their local
// ports from, so on a busy machine a connection could take a chosen port in
// between (CI once saw the controller's metrics port taken that way). Ports
// here come from below that range, where the kernel never assigns one by
// itself, and planes started at once by parallel test binaries keep apart
// by a lock file per port, held until the process that chose it exits.

// portFloor is the lowest port handed out: above the well-known and most
// registered services' ports.
const portFloor = 20000

var portLocks struct {
	sync.Mutex
	held map[int]*os.File // kept open: the flock lasts as long as the file
}

// ReservePort returns a loopback port below the ephemeral range that no
// other test process on this machine holds and nothing listens on, for a
// process started later to bind.
func ReservePort() (int, error) {
	ceiling := ephemeralFloor()
	if ceiling-portFloor < 1000 {
		return 0, fmt.Errorf("the ephemeral port range starts at %d, leaving too few ports above %d", ceiling, portFloor)
	}
	dir := filepath.Join(os.TempDir(), "reverser-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, fmt.Errorf("making the port lock directory: %w", err)
	}
	portLocks.Lock()
	defer portLocks.Unlock()
	if portLocks.held == nil {
		portLocks.held = map[int]*os.File{}
	}
	for range 200 {
		port := portFloor + rand.IntN(ceiling-portFloor)
		if _, ok := portLocks.held[port]; ok {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, fmt.Errorf("opening the lock of port %d: %w", port, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // another test binary's plane holds it
			}
			return 0, fmt.Errorf("locking port %d: %w", port, err)
		}
		// Something outside our planes may listen there (a demo plane whose
		// `make up` has exited, any other service).
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			f.Close()
			continue
		}
		l.Close()
		portLocks.held[port] = f
		return port, nil
	}
	return 0, errors.New("no free port found below the ephemeral range after 200 tries")
}

// ephemeralFloor is the first port of the kernel's ephemeral range, 32768
// (Linux's default) when it cannot be read.
func ephemeralFloor() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return n
}

// all is every port of the plane, for choosing them.
func (p *ports) all() []*int {
	return append([]*int{&p.etcdClient, &p.etcdPeer, &p.kubeAPI, &p.kcm, &p.reverserAPI, &p.git, &p.audit, &p.metrics, &p.health, &p.blackhole, &p.auditRelay,
		&p.fluxSourceMetrics, &p.fluxSourceHealth, &p.fluxStorage, &p.fluxKustomizeMetrics, &p.fluxKustomizeHealth, &p.pprof,
		&p.argoRedis, &p.argoRepo, &p.argoRepoMetrics, &p.argoControllerMetrics}, p.ha.all()...)
}

func freePorts() (ports, error) {
	var p ports
	for _, dst := range p.all() {
		n, err := ReservePort()
		if err != nil {
			return p, fmt.Errorf("finding a free port: %w", err)
		}
		*dst = n
	}
	return p, nil
}
