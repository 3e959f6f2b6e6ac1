module clusterdns.local/golookup

go 1.26
