package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"go.uber.org/zap"

	"github.com/nftpolicy/nftpolicy/k8s"
)

// load reads the manifests, or lists the API server, logging every object
// it had to leave out. Manifests that hold no object are an error unless
// --allow-empty is given: an empty table enforces nothing.
func load(cfg *config, log *zap.Logger) (*k8s.Snapshot, []*k8s.ObjectError, error) {
	if cfg.manifests == "" {
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer cancel()
		in, err := startInformers(ctx, cfg, log, nil)
		if err != nil {
			return nil, nil, err
		}
		return in.Snapshot(), nil, nil
	}
	snap, objErrs, err := k8s.LoadDir(cfg.manifests)
	if err != nil {
		return nil, nil, err
	}
	logObjectErrors(log, objErrs)
	if isEmpty(snap) {
		if !cfg.allowEmpty {
			return nil, nil, fmt.Errorf("%s holds no objects (%d skipped): an empty table enforces nothing; give --allow-empty if that is meant", cfg.manifests, len(objErrs))
		}
		log.Warn("the manifests hold no objects: the table enforces nothing (--allow-empty)", zap.String("dir", cfg.manifests))
	}
	return snap, objErrs, nil
}

// isEmpty reports whether a snapshot holds no object at all: an empty
// directory, or one whose files hold nothing usable.
func isEmpty(snap *k8s.Snapshot) bool {
	return len(snap.Namespaces)+len(snap.Pods)+len(snap.Nodes)+len(snap.Policies)+len(snap.ClusterPolicies) == 0
}

// logObjectErrors logs each manifest object left out or kept at its last
// good version. Kinds nftpolicy does not read (a Service, a Deployment) are
// logged at info level: a directory may be shared with other manifests.
func logObjectErrors(log *zap.Logger, objErrs []*k8s.ObjectError) {
	for _, e := range objErrs {
		fields := []zap.Field{k8s.NameField("at", e.Location()), k8s.NameField("object", e.Object()), k8s.ErrorField(e.Err)}
		switch {
		case e.KeptLastGood:
			log.Warn("rejected a manifest object; its last good version stays in effect", fields...)
		case e.StandIn:
			log.Warn("rejected a manifest object; a stand-in that fails closed is in effect", fields...)
		case errors.Is(e, k8s.ErrUnsupportedKind):
			log.Info("ignored a manifest object of a kind nftpolicy does not read", fields...)
		case errors.Is(e, k8s.ErrIdenticalDuplicate):
			log.Warn("a manifest object is defined more than once, identically; it is used once", fields...)
		default:
			log.Warn("skipped a manifest object", fields...)
		}
	}
}

// maxReadyObjects bounds the objects /readyz names.
const maxReadyObjects = 5

// lostObjects returns why a load may lack objects that nothing stands for
// (see watchManifests): files that cannot be read (dirErr), and the object
// errors that are Lost, the first few named and the rest counted; nil when
// there is none.
func lostObjects(dirErr error, objErrs []*k8s.ObjectError) error {
	var problems []error
	if dirErr != nil {
		problems = append(problems, dirErr)
	}
	n := 0
	for _, e := range objErrs {
		if !e.Lost() {
			continue
		}
		if n++; n <= maxReadyObjects {
			problems = append(problems, errors.New(k8s.Shorten(e.Error(), 256)))
		}
	}
	if n > maxReadyObjects {
		problems = append(problems, fmt.Errorf("and %d more", n-maxReadyObjects))
	}
	if len(problems) == 0 {
		return nil
	}
	return oneLine(problems)
}

// oneLine joins errors with "; ".
type oneLine []error

func (o oneLine) Error() string {
	msgs := make([]string, len(o))
	for i, e := range o {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

func (o oneLine) Unwrap() []error { return o }

// notAsWritten returns the source problem of the object errors that make
// what is enforced differ from the files (every one but a Warning): the
// first few named, and how many there are; nil when there is none.
func notAsWritten(objErrs []*k8s.ObjectError) error {
	var lines []string
	n := 0
	for _, e := range objErrs {
		if e.Warning() {
			continue
		}
		if n++; n <= maxReadyObjects {
			lines = append(lines, k8s.Shorten(e.Error(), 512))
		}
	}
	if n == 0 {
		return nil
	}
	if n > maxReadyObjects {
		lines = append(lines, fmt.Sprintf("and %d more", n-maxReadyObjects))
	}
	return fmt.Errorf("manifest objects skipped or kept at their last good version (%d), so what is enforced is not what the files say; the rest is in effect:\n  %s",
		n, strings.Join(lines, "\n  "))
}

// maxListedNodes bounds the node names an unknown-node warning lists.
const maxListedNodes = 10

// unknownNode returns an error when no Node object and no pod's
// spec.nodeName carries node: nothing would be enforced, which almost
// always means a wrong --node or $NODE_NAME. It lists the names the source
// does know, at most maxListedNodes of them.
func unknownNode(node string, snap *k8s.Snapshot) error {
	// Every snapshot is checked, and the node is almost always known: look
	// for it first, without building a map of the nodes of 150k pods (a
	// quarter of the daemon's CPU per event at that size).
	if slices.ContainsFunc(snap.Nodes, func(n *corev1.Node) bool { return n.Name == node }) ||
		slices.ContainsFunc(snap.Pods, func(p *k8s.Pod) bool { return p.Spec.NodeName == node }) {
		return nil
	}
	known := map[string]bool{}
	for _, n := range snap.Nodes {
		known[n.Name] = true
	}
	for _, p := range snap.Pods {
		if p.Spec.NodeName != "" {
			known[p.Spec.NodeName] = true
		}
	}
	if known[node] {
		return nil
	}
	names := slices.Sorted(maps.Keys(known))
	list := "none"
	if len(names) > 0 {
		shown := names[:min(len(names), maxListedNodes)]
		for i, n := range shown {
			shown[i] = strconv.Quote(k8s.Shorten(n, 64))
		}
		list = strings.Join(shown, ", ")
		if more := len(names) - len(shown); more > 0 {
			list += fmt.Sprintf(" and %d more", more)
		}
	}
	return fmt.Errorf("node %q matches no Node and no pod, so nothing is enforced on it; check --node or $NODE_NAME (nodes known: %s)", k8s.Shorten(node, 256), list)
}

// checkNode warns about an unknown node in a snapshot that holds objects.
func checkNode(cfg *config, snap *k8s.Snapshot, log *zap.Logger) error {
	if isEmpty(snap) {
		return nil
	}
	err := unknownNode(cfg.node, snap)
	if err != nil {
		log.Warn("this node is unknown to the source", k8s.NameField("node", cfg.node), k8s.ErrorField(err))
	}
	return err
}

// A sourceState is the source's side of /readyz: why the snapshots it hands
// the Syncer are not the source's current, complete content, or why they
// enforce nothing. The Syncer reports its own side (Syncer.Status).
type sourceState struct {
	mu  sync.Mutex
	err error
}

func (st *sourceState) set(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.err = err
}

func (st *sourceState) get() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}

// sourceProblems joins the problems of a source under its name, e.g.
// "manifests source: /etc/nftpolicy/manifests: ..."; nil when there are none.
func sourceProblems(source string, problems ...error) error {
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	return nil
}

// A nodeWatch checks each snapshot for an unknown --node and logs when
// that changes, not at every snapshot.
type nodeWatch struct {
	node string
	log  *zap.Logger
	err  error
}

func (nw *nodeWatch) check(snap *k8s.Snapshot) error {
	var err error
	if !isEmpty(snap) {
		err = unknownNode(nw.node, snap)
	}
	switch {
	case err != nil && (nw.err == nil || nw.err.Error() != err.Error()):
		nw.log.Warn("this node is unknown to the source: nothing is enforced on it", k8s.NameField("node", nw.node), k8s.ErrorField(err))
	case err == nil && nw.err != nil:
		nw.log.Info("this node is known to the source again", k8s.NameField("node", nw.node))
	}
	nw.err = err
	return err
}

// checkSnapshots passes on the informers' snapshots, and keeps src telling
// why they may not be the API server's current content or enforce nothing
// here:
//
//   - a list or watch that fails (k8s.Informers.Health: the API server is
//     unreachable, or refuses us) makes the daemon not ready, naming the
//     API server and the error, until every informer has caught up again
//     (relisted, or resumed its watch without a gap). The table keeps the
//     last state meanwhile. The informers log the failure with backoff;
//   - an unknown node is logged and makes the daemon not ready.
func checkSnapshots(ctx context.Context, cfg *config, log *zap.Logger, src *sourceState, in *k8s.Informers) <-chan *k8s.Snapshot {
	out := make(chan *k8s.Snapshot)
	snapshots := in.Watch(ctx)
	go func() {
		nw := &nodeWatch{node: cfg.node, log: log}
		var nodeErr error
		for {
			changed, healthErr := in.Health()
			src.set(sourceProblems("API source", healthErr, nodeErr))
			select {
			case <-changed:
			case snap, ok := <-snapshots:
				if !ok {
					return
				}
				nodeErr = nw.check(snap)
				_, healthErr = in.Health()
				src.set(sourceProblems("API source", healthErr, nodeErr))
				select {
				case out <- snap:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// watchManifests turns the directory's changes into snapshots for the
// Syncer, and keeps src telling why they are not the directory's current
// content.
//
//   - A file or the directory that cannot be read or parsed keeps its last
//     good objects (k8s.WatchDir); the error is logged each time WatchDir
//     repeats it, with backoff, and makes the daemon not ready.
//   - A directory that holds no object (recreated empty, every file
//     removed) is not programmed without --allow-empty: an empty table
//     opens every pod. The last programmed state stays, and the daemon is
//     not ready until objects come back.
//   - Every NetworkPolicy gone at once, where the last programmed load held
//     some, is logged as an error naming how many (more than half of them
//     gone, as a warning). It is programmed: deleting every policy is a
//     legitimate change (the data-plane suite resets this way between
//     cases), and nothing tells it apart from a mistake. Except after the
//     directory was removed or emptied (states not programmed, see above):
//     a directory that comes back without any policy is most likely partly
//     restored, and dropping every policy opens every pod, so without
//     --allow-empty such a load is treated like an empty one: the last
//     programmed state stays and the daemon is not ready until a policy
//     comes back. A restore whose files all arrive within one --poll
//     interval of each other is not seen as one (k8s.WatchDir loads
//     changes together once they have all settled); a restart has nothing
//     to compare with.
//   - Objects rejected or duplicated (k8s.ObjectError that is not a
//     Warning) make the daemon not ready, naming the first few: what is
//     enforced (the rest, and the last good versions WatchDir keeps) is not
//     what the files say until they are fixed.
//   - An unknown --node is logged and makes the daemon not ready.
//
// When a table was programmed before this daemon started (held), the first
// load is sent only once nothing it lacks could open a pod: a restart has
// no last good version of an object to fall back on, so a file that cannot
// be read or does not parse, a document whose kind or name cannot be read,
// a kind typo, a Namespace with an invalid name, a rejected Node or a
// rejected ClusterNetworkPolicy (left out, an Admin policy's denies are
// gone) would drop objects that nothing stands for
// (k8s.ObjectError.Lost). Until then
// the table from before the restart (the last good state) stays, and the
// daemon is not ready, naming those errors. Errors whose objects have a
// stand-in that fails closed (k8s.ObjectError.StandIn: a rejected or
// differing NetworkPolicy isolates and allows nothing; a rejected Pod is
// kept at its addresses and quarantined when its labels are not all known,
// and one whose copies disagree on its address is quarantined at each; a
// rejected Namespace is quarantined, so no selector of its labels names
// its pods) do not
// hold it: the current manifests are programmed at once, so that valid
// changes (a new deny) take effect, and the daemon stays not ready naming
// the errors, as above.
func watchManifests(ctx context.Context, cfg *config, log *zap.Logger, src *sourceState, held bool, tampered <-chan struct{}) <-chan *k8s.Snapshot {
	snapshots := make(chan *k8s.Snapshot)
	go func() {
		nw := &nodeWatch{node: cfg.node, log: log}
		var seen, sent *k8s.Snapshot // last from WatchDir, last to the Syncer
		// emptied: since the last snapshot sent, the directory could not be
		// listed or held no object.
		emptied := false
		var nodeErr error      // of the last snapshot sent
		var last k8s.DirUpdate // the newest update, handled again when the hold ends
		// handle takes one update; false when ctx ended.
		handle := func(u k8s.DirUpdate) bool {
			last = u
			var problems []error
			if u.Err != nil {
				// Metrics: count source errors here once the daemon has
				// metrics (nftpolicy_source_errors_total{source="manifests"}).
				log.Error("cannot read all of the manifests; what cannot be read keeps its last good objects",
					zap.String("dir", cfg.manifests), k8s.ErrorField(u.Err))
				problems = append(problems, u.Err)
			}
			objErr := notAsWritten(u.Errors)
			problems = append(problems, objErr)
			snap := u.Snapshot
			if u.Unlisted || snap != nil && isEmpty(snap) {
				emptied = true
			}
			// Every policy gone at once, but not every object.
			var vanished int
			if snap != nil && !isEmpty(snap) && len(snap.Policies) == 0 && sent != nil {
				vanished = len(sent.Policies)
			}
			if snap != nil && snap != seen {
				seen = snap
				logObjectErrors(log, u.Errors)
				switch {
				case vanished > 0 && emptied && !cfg.allowEmpty:
					log.Error("the manifests came back without any NetworkPolicy after the directory was removed or emptied; keeping the last programmed state until one comes back (--allow-empty would program no policy, which isolates no pod)",
						zap.String("dir", cfg.manifests), zap.Int("vanished", vanished))
				case vanished > 0:
					log.Error("every NetworkPolicy vanished from the manifests at once: programming no policy, which isolates no pod",
						zap.String("dir", cfg.manifests), zap.Int("vanished", vanished))
				case sent != nil && !isEmpty(snap) && len(snap.Policies)*2 < len(sent.Policies):
					log.Warn("more than half of the NetworkPolicies vanished from the manifests at once",
						zap.String("dir", cfg.manifests), zap.Int("before", len(sent.Policies)), zap.Int("now", len(snap.Policies)))
				}
				if isEmpty(snap) && cfg.allowEmpty {
					log.Warn("the manifests hold no objects: programming an empty table, which enforces nothing (--allow-empty)", zap.String("dir", cfg.manifests))
				} else if isEmpty(snap) {
					log.Error("the manifests hold no objects; keeping the last programmed state (--allow-empty would program an empty table, which enforces nothing)",
						zap.String("dir", cfg.manifests), zap.Int("skipped", len(u.Errors)))
				}
			}
			if snap != nil && isEmpty(snap) && !cfg.allowEmpty {
				problems = append(problems, fmt.Errorf("%s holds no objects; keeping the last programmed state (--allow-empty to program an empty table)", cfg.manifests))
				snap = nil
			}
			if vanished > 0 && emptied && !cfg.allowEmpty {
				problems = append(problems, fmt.Errorf("%s came back without any NetworkPolicy after it was removed or emptied, where %d were programmed; keeping the last programmed state until one comes back (--allow-empty to program no policy)", cfg.manifests, vanished))
				snap = nil
			}
			if held && sent == nil && snap != nil {
				if lost := lostObjects(u.Err, u.Errors); lost != nil {
					problems = append(problems, fmt.Errorf("keeping the table programmed before this start until %s loads without errors that leave objects out with nothing failing closed in their place: %w", cfg.manifests, lost))
					log.Error("the manifests have errors that leave objects out, and there is no last good version of them since the start; keeping the table programmed before it until they are fixed",
						zap.String("dir", cfg.manifests), k8s.ErrorField(lost))
					snap = nil
				}
			}
			if snap != nil && snap != sent {
				nodeErr = nw.check(snap)
			}
			src.set(sourceProblems("manifests source", append(problems, nodeErr)...))
			if snap == nil || snap == sent {
				return true
			}
			sent, emptied = snap, false
			select {
			case snapshots <- snap:
				return true
			case <-ctx.Done():
				return false
			}
		}
		updates := k8s.WatchDir(ctx, cfg.manifests, cfg.poll, cfg.rescan)
		for {
			select {
			case u, ok := <-updates:
				if ok && u.Polling != nil {
					log.Warn("the manifests directory is polled, not watched: a change takes up to two --poll intervals to load",
						zap.String("dir", cfg.manifests), zap.Duration("poll", cfg.poll), k8s.ErrorField(u.Polling))
				}
				if !ok || !handle(u) {
					return
				}
			case <-tampered:
				// While holding, the only copy of the last good state is
				// the table itself: once someone else changes it (deletes
				// it, makes it dormant), there is nothing left to keep,
				// and what loads (failing closed where it can) is better
				// than a table nobody repairs.
				tampered = nil
				if held && sent == nil {
					held = false
					log.Error("the table kept since the start was changed by someone else; programming what the manifests load", zap.String("dir", cfg.manifests))
					if last.Snapshot != nil && !handle(last) {
						return
					}
				}
			}
		}
	}()
	return snapshots
}

// startInformers connects to the API server and returns once the informer
// caches hold a complete list, so that the first sync never programs a
// partial cluster (which would open or close traffic wrongly). Meanwhile,
// when src is not nil, it keeps src telling why they have not (the API
// server unreachable, or refusing us).
func startInformers(ctx context.Context, cfg *config, log *zap.Logger, src *sourceState) (*k8s.Informers, error) {
	client, err := k8s.NewClient(cfg.kubeconfig, "nftpolicy/"+version)
	if err != nil {
		return nil, err
	}
	policy, err := k8s.NewPolicyClient(cfg.kubeconfig, "nftpolicy/"+version)
	if err != nil {
		return nil, err
	}
	slim, err := k8s.NewSlimClient(cfg.kubeconfig, "nftpolicy/"+version)
	if err != nil {
		return nil, err
	}
	in := k8s.NewInformers(client, k8s.InformerOptions{Log: log, Policy: policy, Slim: slim})
	if src != nil {
		synced := make(chan struct{})
		followed := make(chan struct{})
		go func() {
			defer close(followed)
			for {
				changed, err := in.Health()
				src.set(sourceProblems("API source", err))
				select {
				case <-changed:
				case <-synced:
					return
				}
			}
		}()
		// checkSnapshots takes over src once this returns.
		defer func() { close(synced); <-followed }()
	}
	start := time.Now()
	log.Info("waiting for the informer caches", zap.String("source", cfg.source()))
	if err := in.Start(ctx); err != nil {
		return nil, err
	}
	log.Info("informer caches synced", zap.Duration("took", time.Since(start)))
	return in, nil
}
