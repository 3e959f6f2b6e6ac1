module clusterdns.local/gocompat

go 1.26
