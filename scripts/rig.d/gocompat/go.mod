module clusterdns.local/gocompat

go 1.26

require (
	github.com/miekg/dns v1.1.72
	github.com/spf13/pflag v1.0.10
)

require (
	golang.org/x/mod v0.31.0 // indirect
	golang.org/x/net v0.48.0 // indirect
	golang.org/x/sync v0.19.0 // indirect
	golang.org/x/sys v0.39.0 // indirect
	golang.org/x/tools v0.40.0 // indirect
)
