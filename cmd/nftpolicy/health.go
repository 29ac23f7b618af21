package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/nftpolicy/nftpolicy/enforcer"
)

// healthHandler serves /healthz (the process is alive) and /readyz: ready
// when the latest sync succeeded and the source has no problem (src), each
// reason for not being ready on a line of its own, e.g.
//
//	manifests source: stat /etc/nftpolicy/manifests/x.yaml: too many levels of symbolic links; keeping the objects it held before
//	synced generation 4
//
// or, while the API server is away,
//
//	API source: cannot list and watch namespaces, pods, nodes, networkpolicies at the API server https://10.0.0.1:6443 since 2026-01-02T15:04:05Z (9 failed requests); the caches keep the state last listed: Get "https://10.0.0.1:6443/api/v1/pods?...": dial tcp 10.0.0.1:6443: connect: connection refused
//	synced generation 7
//
// The last line is "synced generation N" once a sync succeeded, N counting
// successful syncs, one per change of the manifests, so a test can wait for
// the sync that follows its change instead of sleeping.
func healthHandler(s *enforcer.Syncer, src *sourceState) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		gen, err := s.Status()
		var reasons []string
		if srcErr := src.get(); srcErr != nil {
			reasons = append(reasons, strings.TrimSpace(srcErr.Error()))
		}
		switch {
		case err != nil:
			reasons = append(reasons, "last sync failed: "+strings.TrimSpace(err.Error()))
		case gen == 0:
			reasons = append(reasons, "not synced yet")
		}
		if len(reasons) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, strings.Join(reasons, "\n")+"\n")
		}
		if gen > 0 {
			fmt.Fprintf(w, "synced generation %d\n", gen)
		}
	})
	return mux
}
