package natstest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// The accounts of an operator-mode cluster (Config.Operator). Both have JetStream.
const (
	// AccountApp is the account the helper's own clients (Connect, the probes) use:
	// the one a test's streams live in.
	AccountApp = "APP"
	// AccountOther is a second account, isolated from AccountApp: a client of it
	// does not see AccountApp's streams (a user of the wrong account).
	AccountOther = "OTHER"
	// AccountUnknown is an account the operator signs but the servers' resolver does
	// not hold: its users are refused (authorization violation).
	AccountUnknown = "UNKNOWN"
	// accountSystem is the system account the servers talk in.
	accountSystem = "SYS"
)

// operator are the keys and JWTs of an operator-mode cluster: generated once per
// Start, the same for every server (resolver MEMORY, preloaded).
type operator struct {
	jwt      string                   // the operator's JWT, signed by itself
	accounts map[string]nkeys.KeyPair // by name: each account's key, which signs its users
	jwts     map[string]string        // account public key → the account's JWT
	sysPub   string
	helper   nats.Option // the helper's own user of AccountApp
}

// newOperator generates an operator, the system account and the accounts AccountApp
// and AccountOther with JetStream (no limits but the servers'), and a user of
// AccountApp for the helper.
func newOperator() (*operator, error) {
	okp, err := nkeys.CreateOperator()
	if err != nil {
		return nil, err
	}
	opub, err := okp.PublicKey()
	if err != nil {
		return nil, err
	}
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "natstest"
	o := &operator{accounts: map[string]nkeys.KeyPair{}, jwts: map[string]string{}}
	unknownPub := ""
	for _, name := range []string{accountSystem, AccountApp, AccountOther, AccountUnknown} {
		akp, err := nkeys.CreateAccount()
		if err != nil {
			return nil, err
		}
		apub, err := akp.PublicKey()
		if err != nil {
			return nil, err
		}
		ac := jwt.NewAccountClaims(apub)
		ac.Name = name
		if name != accountSystem { // the system account may not have JetStream
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		} else {
			o.sysPub = apub
			oc.SystemAccount = apub
		}
		if o.jwts[apub], err = ac.Encode(okp); err != nil {
			return nil, fmt.Errorf("account %s JWT: %w", name, err)
		}
		if name == AccountUnknown {
			unknownPub = apub
		}
		o.accounts[name] = akp
	}
	delete(o.jwts, unknownPub) // not preloaded
	if o.jwt, err = oc.Encode(okp); err != nil {
		return nil, fmt.Errorf("operator JWT: %w", err)
	}
	userJWT, seed, err := o.user(AccountApp, "natstest")
	if err != nil {
		return nil, err
	}
	o.helper = nats.UserJWTAndSeed(userJWT, string(seed))
	return o, nil
}

// user generates a user of account: its JWT, signed by the account, and its seed.
func (o *operator) user(account, name string) (string, []byte, error) {
	akp, ok := o.accounts[account]
	if !ok {
		return "", nil, fmt.Errorf("no account %q: want %s, %s or %s", account, AccountApp, AccountOther, AccountUnknown)
	}
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return "", nil, err
	}
	upub, err := ukp.PublicKey()
	if err != nil {
		return "", nil, err
	}
	seed, err := ukp.Seed()
	if err != nil {
		return "", nil, err
	}
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	userJWT, err := uc.Encode(akp)
	if err != nil {
		return "", nil, fmt.Errorf("user %s JWT: %w", name, err)
	}
	return userJWT, seed, nil
}

// config is the servers' configuration of operator mode.
func (o *operator) config() string {
	var b strings.Builder
	fmt.Fprintf(&b, "operator: %q\nsystem_account: %q\nresolver: MEMORY\nresolver_preload: {\n", o.jwt, o.sysPub)
	pubs := make([]string, 0, len(o.jwts))
	for pub := range o.jwts {
		pubs = append(pubs, pub)
	}
	sort.Strings(pubs)
	for _, pub := range pubs {
		fmt.Fprintf(&b, "  %s: %q\n", pub, o.jwts[pub])
	}
	b.WriteString("}\n")
	return b.String()
}

// Creds writes a NATS credentials file (a user JWT and its NKey seed, as `nsc`
// writes it) of a new user of account (AccountApp, AccountOther or AccountUnknown) of an
// operator-mode cluster, and returns its path: what nats.UserCredentials and a
// sidecar's --nats-creds take. It fails the test of a cluster without
// Config.Operator.
func (c *Cluster) Creds(account string) string {
	c.t.Helper()
	if c.op == nil {
		c.t.Fatal("natstest: Creds: the cluster is not in operator mode: set Config.Operator")
	}
	userJWT, seed, err := c.op.user(account, c.t.Name())
	if err != nil {
		c.t.Fatalf("natstest: Creds: %v", err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		c.t.Fatalf("natstest: Creds: %v", err)
	}
	path := filepath.Join(c.t.TempDir(), strings.ToLower(account)+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		c.t.Fatalf("natstest: %v", err)
	}
	return path
}

// clientAuth are the options of the helper's own connections: its user of
// AccountApp in operator mode, none otherwise.
func (c *Cluster) clientAuth() []nats.Option {
	if c.op == nil {
		return nil
	}
	return []nats.Option{c.op.helper}
}
