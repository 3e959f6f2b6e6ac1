// golookup resolves one name as most cluster software written in Go does:
// Go's own resolver (CGO_ENABLED=0, so never the C library), reading
// /etc/resolv.conf's servers, search list, ndots, timeout and attempts.
// It prints the IPv4 addresses on success; on failure the getaddrinfo
// error number a C program would see (-2 for a name that does not exist,
// -3 for anything temporary), exit status 2, as tests/clients/getaddrinfo.c
// does, so the rig's client images answer alike.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintf(os.Stderr, "usage: %s NAME\n", os.Args[0])
		os.Exit(64)
	}
	r := &net.Resolver{PreferGo: true}
	ips, err := r.LookupIP(context.Background(), "ip4", os.Args[1])
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			fmt.Println("-2")
		} else {
			fmt.Println("-3")
		}
		os.Exit(2)
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	fmt.Println(strings.Join(out, " ") + " ")
}
