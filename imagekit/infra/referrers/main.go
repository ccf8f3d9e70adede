// imagekit's fourth loopback registry: go-containerregistry's own pkg/registry with the OCI 1.1
// referrers API turned on (`crane registry serve` leaves it off), blobs on disk.
//
// Built by imagekit/infra/referrers_registry.py from Debian's
// golang-github-google-go-containerregistry-dev in GOPATH mode (no module download).
// Manifests and tags live in memory: a restart forgets them, blobs stay under -blobs.
package main

import (
	"flag"
	"log"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5004", "host:port to listen on")
	blobs := flag.String("blobs", "", "directory for blobs (required)")
	flag.Parse()
	if *blobs == "" {
		log.Fatal("-blobs DIR is required")
	}
	if err := os.MkdirAll(*blobs, 0o755); err != nil {
		log.Fatal(err)
	}
	logger := log.New(os.Stderr, "", log.LstdFlags)
	handler := registry.New(
		registry.Logger(logger),
		registry.WithReferrersSupport(true),
		registry.WithBlobHandler(registry.NewDiskBlobHandler(*blobs)),
	)
	logger.Printf("serving on %s, referrers API on, blobs in %s", *addr, *blobs)
	log.Fatal(http.ListenAndServe(*addr, handler))
}
