package etcdbackend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/claimstore/claimstore/claimstore/storage"
)

// The errors etcd gives in production, each with its own words: a cluster
// out of space, an identity etcd's access control refuses, and a cluster
// that cannot serve (every member unreachable, or no quorum). Each is a
// sentinel wrapped, with the key, in an *fs.PathError whose message says
// what to do.

// ErrNoSpace is wrapped by a request etcd refused for its space quota
// (`mvcc: database space exceeded`, the NOSPACE alarm): the cluster's
// backend reached --quota-backend-bytes and etcd refuses every write until
// an operator frees space and disarms the alarm. Reads still work.
var ErrNoSpace = errors.New("the etcd cluster is out of space (NOSPACE alarm: its backend reached --quota-backend-bytes), and refuses every write")

// ErrAccessDenied is wrapped by a request etcd's access control refused: a
// role that may not read or write the claim root's prefix, no user given to
// a cluster with access control enabled, or a user etcd does not know.
var ErrAccessDenied = errors.New("etcd's access control refused the request")

// ErrUnavailable is wrapped by a request the cluster did not serve in time
// because no member could (every member unreachable) or none has a leader
// (quorum lost); the message names each endpoint and what it answered.
var ErrUnavailable = errors.New("the etcd cluster cannot serve requests")

// noSpaceAdvice is what an operator does for a cluster out of space.
const noSpaceAdvice = "nothing more can be written until an operator frees space: compact the history (`etcdctl compact REV`, REV the current revision from `etcdctl endpoint status -w json`), defragment every member (`etcdctl defrag --cluster`), then disarm the alarm (`etcdctl alarm disarm`); old revisions of the store's own keys are removed with `claimctl prune`; raise --quota-backend-bytes and enable --auto-compaction-retention so that it does not happen again (see docs/ETCD.md)"

// isNoSpace reports whether err is etcd's quota refusal.
func isNoSpace(err error) bool { return errors.Is(err, rpctypes.ErrNoSpace) }

// isAccess reports whether err is a refusal of etcd's access control.
func isAccess(err error) bool {
	for _, e := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty, rpctypes.ErrUserNotFound, rpctypes.ErrAuthFailed, rpctypes.ErrInvalidAuthToken} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// isUnavailable reports whether err says the cluster did not serve a
// request in time: a deadline, no leader, a member that cannot be reached.
func isUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost) {
		return true
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded
	}
	return false
}

// who names the identity requests are made as, for messages.
func (b *Backend) who() string {
	if b.user != "" {
		return "user " + b.user
	}
	return "this client (no --user given)"
}

// accessErr words a refusal of access control for op on key.
func (b *Backend) accessErr(op, key string, err error) error {
	var why string
	switch {
	case errors.Is(err, rpctypes.ErrUserEmpty):
		why = "the cluster has access control enabled and no user was given: give a user (claimctl --user NAME, Config.User) or a client certificate (--cert, --key) whose common name is an etcd user"
	case errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrUserNotFound), errors.Is(err, rpctypes.ErrInvalidAuthToken):
		why = b.who() + " could not be authenticated (wrong user name or password, or a user that was removed)"
	case op == "read" || op == "read head" || op == "list":
		why = fmt.Sprintf("%s may not read %s/: supervisors need a role with readwrite permission on that prefix and nothing else (`etcdctl role grant-permission ROLE --prefix=true readwrite %s/`)", b.who(), b.prefix, b.prefix)
	default:
		why = fmt.Sprintf("%s may not write under %s/: nothing was written; supervisors need a role with readwrite permission on that prefix and nothing else (`etcdctl role grant-permission ROLE --prefix=true readwrite %s/`); a read-only role can only show, list and log", b.who(), b.prefix, b.prefix)
	}
	return pathErr(op, key, fmt.Errorf("%w: %s (%v)", ErrAccessDenied, why, err))
}

// reqErr words a failed request op on key: the production failures get
// their own sentinels and advice; others are returned as they are.
func (b *Backend) reqErr(ctx context.Context, op, key string, err error) error {
	switch {
	case isNoSpace(err):
		return pathErr(op, key, fmt.Errorf("%w: %s (%v)", ErrNoSpace, noSpaceAdvice, err))
	case isAccess(err):
		return b.accessErr(op, key, err)
	case ctx.Err() == nil && isUnavailable(err):
		return pathErr(op, key, fmt.Errorf("%w within %v: %s (%v)", ErrUnavailable, b.timeout, b.diagnose(), err))
	}
	return pathErr(op, key, err)
}

// memberState is what one endpoint answered to a status request.
type memberState struct {
	endpoint string
	err      error
	leader   bool // it knows a leader
	unknown  bool // it answered, and refused this identity its status
}

// survey asks every endpoint of the client for its status, at once and
// bounded, to tell an unreachable cluster from one without a quorum.
func (b *Backend) survey() []memberState {
	eps := b.cli.Endpoints()
	out := make([]memberState, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		out[i].endpoint = strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A quarter of the request timeout: a member that does not
			// answer a status at once on a dead port never will.
			ctx, cancel := context.WithTimeout(context.Background(), min(b.timeout/4, time.Second))
			defer cancel()
			resp, err := b.cli.Status(ctx, ep)
			if isAccess(err) {
				// It answered; whether it has a leader is not ours
				// to know.
				out[i].unknown = true
				return
			}
			if err != nil {
				out[i].err = err
				return
			}
			out[i].leader = resp.Leader != 0
		}()
	}
	wg.Wait()
	return out
}

// quorumLost reports whether no endpoint knows a leader (every one
// unreachable, or those that answer have none), and the survey's words.
func (b *Backend) quorumLost() (bool, string) {
	ms := b.survey()
	lost := true
	for _, m := range ms {
		if m.err == nil && (m.leader || m.unknown) {
			lost = false
		}
	}
	return lost, describeSurvey(ms)
}

// diagnose says why the cluster did not answer: each endpoint and what it
// answered, and what that means.
func (b *Backend) diagnose() string {
	_, words := b.quorumLost()
	return words
}

func describeSurvey(ms []memberState) string {
	var parts []string
	up, led, refused := 0, 0, 0
	for _, m := range ms {
		switch {
		case m.err != nil:
			parts = append(parts, fmt.Sprintf("%s: unreachable (%v)", m.endpoint, m.err))
		case m.unknown:
			up++
			refused++
			parts = append(parts, m.endpoint+": up (its status is refused to this identity)")
		case m.leader:
			up++
			led++
			parts = append(parts, m.endpoint+": up, has a leader")
		default:
			up++
			parts = append(parts, m.endpoint+": up, no leader")
		}
	}
	var what string
	switch {
	case up == 0:
		what = "no member answers: start the members (or check the endpoints, the network and the TLS settings); nothing was decided"
	case led == 0 && refused > 0:
		what = "members answer, but whether they have a leader is refused to this identity: the cluster may be electing or without a quorum; try again, or ask its operator"
	case led == 0:
		what = "the members that answer have no leader: a quorum (a majority of the cluster's members) is not running; start the stopped members (see docs/ETCD.md, after a member loss); nothing was decided"
	default:
		what = "a member has a leader, but the request was not served in time: the cluster may be overloaded or electing; try again, or raise --command-timeout"
	}
	return what + " [" + strings.Join(parts, "; ") + "]"
}

// decideRefusedForSpace decides a publishing transaction etcd answered with
// NOSPACE. That answer comes once the request is over, never while it may
// still be applied: the API's quota check and, under the raised alarm, the
// capped applier refuse it unapplied, but the quota applier
// (server/etcdserver/apply/quota.go) applies a transaction that passed the
// check and then reports NOSPACE because the backend is now over the quota.
// So the transaction may have been published, and one read (reads work
// under the alarm) decides it for good: ours means published, another's a
// lost race, absent not published — no fence is needed, since nothing of
// it is left in flight.
func (b *Backend) decideRefusedForSpace(ctx context.Context, key string, data []byte, cause error) error {
	rctx, cancel := b.ctx(ctx)
	resp, err := b.cli.Get(rctx, key)
	cancel()
	switch {
	case err != nil:
		return &IndeterminateError{Key: key, Cause: b.reqErr(ctx, "publish", key, cause), Last: err}
	case len(resp.Kvs) > 0 && bytes.Equal(resp.Kvs[0].Value, data):
		return nil
	case len(resp.Kvs) > 0:
		return pathErr("publish", key, fmt.Errorf("%w (decided by reading back after the cluster answered NOSPACE)", storage.ErrRevisionExists))
	}
	return pathErr("publish", key, fmt.Errorf("%w: not published (read back: absent, final): %s (%v)", ErrNoSpace, noSpaceAdvice, cause))
}

// txnLeader runs the publishing transaction, waiting out an election: a
// transaction refused for no leader was refused before it was proposed
// (etcd's API refuses a request that requires a leader while its member
// has none), so it is tried again until one is elected, for at most the
// request timeout; then the cluster is taken as having lost its quorum.
func (b *Backend) txnLeader(ctx context.Context, key string, data []byte, fence fenceID, g *prevGuard) (*clientv3.TxnResponse, error) {
	deadline := time.Now().Add(b.timeout)
	for delay := 25 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		if b.beforeTxn != nil {
			b.beforeTxn()
		}
		rctx, cancel := b.ctx(ctx)
		resp, err := b.createTxn(rctx, key, data, fence, g)
		cancel()
		if !errors.Is(err, rpctypes.ErrNoLeader) || time.Now().Add(delay).After(deadline) {
			return resp, err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, err
		}
	}
}
