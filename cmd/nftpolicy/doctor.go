package main

import (
	"encoding/json"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/doctor"
	"github.com/nftpolicy/nftpolicy/enforcer"
	"github.com/nftpolicy/nftpolicy/nft"
)

// doctorFlags are the flags of `nftpolicy doctor` beyond the shared ones.
type doctorFlags struct {
	json bool
}

// runDoctor reads the namespace and prints what the doctor found (see
// package doctor). It never writes the namespace. Given a source
// (--manifests or --kubeconfig; in a pod, the API server is not asked
// unless --kubeconfig names it), it compiles the table as the daemon
// would, with the priority the daemon would resolve now, and compares the
// kernel's with it by content.
func runDoctor(cfg *config, stdout io.Writer, log *zap.Logger) error {
	conn, err := nft.Open(cfg.netns)
	if err != nil {
		return err
	}
	defer conn.Close()
	opts := doctor.Options{Netns: cfg.netns, Table: cfg.table, MarkMask: cfg.markMask}
	if cfg.manifests != "" || cfg.kubeconfig != "" {
		snap, _, err := load(cfg, log)
		if err != nil {
			return err
		}
		checkNode(cfg, snap, log)
		eo := cfg.options()
		priority, err := enforcer.ResolvePriority(conn, cfg.priority, eo.Table, log)
		if err != nil {
			return err
		}
		table, problems := enforcer.NewCompiler(eo).Compile(snap, priority)
		enforcer.LogProblems(log, problems)
		opts.Expected = table
		opts.Source = cfg.source() + ", node " + cfg.node
	}
	r, err := doctor.Check(conn, opts)
	if err != nil {
		return err
	}
	if cfg.doctor.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("encode the report: %w", err)
		}
		return nil
	}
	return r.WriteText(stdout)
}
