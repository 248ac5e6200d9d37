module github.com/fanout/fanout/bench/natsbench

go 1.26.8

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/fanout/fanout v0.0.0
	github.com/nats-io/nats.go v1.55.0
)

require (
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// bench/loadkit, the pacer and stamps shared with `sidecar bench`, from this checkout.
replace github.com/fanout/fanout => ../..
