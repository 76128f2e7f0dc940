package main

import (
	"fmt"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
)

// proxyURI is base with its hosts replaced by addr, a fault proxy standing
// for the deployment: credentials, database and every option are kept
// (the options byte for byte), and directConnection=true is set, since one
// proxy is one server to the driver. A mongodb+srv URI becomes a mongodb://
// one with tls=true unless it says otherwise, as SRV implies TLS; options an
// SRV deployment publishes in DNS TXT records are not carried over. extra
// options ("name=value") are added, replacing any of the same name.
func proxyURI(base, addr string, extra ...string) (string, error) {
	cs, err := connstring.Parse(base)
	if err != nil {
		return "", fmt.Errorf("parsing the test server's URI: %w", err)
	}
	u := &url.URL{Scheme: "mongodb", Host: addr, Path: "/" + cs.Database}
	switch {
	case cs.PasswordSet:
		u.User = url.UserPassword(cs.Username, cs.Password)
	case cs.Username != "":
		u.User = url.User(cs.Username)
	}
	extra = append(extra, "directConnection=true")
	if strings.HasPrefix(base, "mongodb+srv://") && !cs.SSLSet {
		extra = append(extra, "tls=true")
	}
	replaced := func(pair string) bool {
		key, _, _ := strings.Cut(pair, "=")
		return slices.ContainsFunc(extra, func(e string) bool { k, _, _ := strings.Cut(e, "="); return strings.EqualFold(k, key) })
	}
	var opts []string
	if _, raw, ok := strings.Cut(base, "?"); ok {
		for _, pair := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
			if !replaced(pair) {
				opts = append(opts, pair)
			}
		}
	}
	u.RawQuery = strings.Join(append(opts, extra...), "&")
	return u.String(), nil
}

// proxyTarget is the server a proxy in front of base forwards to: its first
// host, which must accept writes (a standalone, or a replica set's primary
// listed first).
func proxyTarget(base string) (string, error) {
	cs, err := connstring.Parse(base) // resolves a mongodb+srv URI's hosts
	if err != nil {
		return "", fmt.Errorf("parsing the test server's URI: %w", err)
	}
	if len(cs.Hosts) == 0 {
		return "", fmt.Errorf("no host in the test server's URI")
	}
	host := cs.Hosts[0]
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(strings.Trim(host, "[]"), "27017")
	}
	return host, nil
}

func TestProxyURIKeepsCredentialsAndOptions(t *testing.T) {
	t.Parallel()
	const proxy = "127.0.0.1:40001"
	for _, tc := range []struct{ base, want, target string }{
		{"mongodb://127.0.0.1:27017/", "mongodb://127.0.0.1:40001/?serverSelectionTimeoutMS=2000&directConnection=true", "127.0.0.1:27017"},
		{"mongodb://db", "mongodb://127.0.0.1:40001/?serverSelectionTimeoutMS=2000&directConnection=true", "db:27017"},
		{"mongodb://admin:p%40ss%3Aw0rd@h1:27018,h2:27019/app?replicaSet=rs0&authSource=admin&tls=true&appName=ci",
			"mongodb://admin:p%40ss%3Aw0rd@127.0.0.1:40001/app?replicaSet=rs0&authSource=admin&tls=true&appName=ci&serverSelectionTimeoutMS=2000&directConnection=true", "h1:27018"},
		{"mongodb://u:pw@[::1]:27017/?directConnection=false&w=majority;retryWrites=false&serverSelectionTimeoutMS=30000",
			"mongodb://u:pw@127.0.0.1:40001/?w=majority&retryWrites=false&serverSelectionTimeoutMS=2000&directConnection=true", "[::1]:27017"},
		{"mongodb://CN%3Dclient@db:27017/?authMechanism=MONGODB-X509&tls=true&tlsCertificateKeyFile=%2Fcerts%2Fc.pem",
			"mongodb://CN=client@127.0.0.1:40001/?authMechanism=MONGODB-X509&tls=true&tlsCertificateKeyFile=%2Fcerts%2Fc.pem&serverSelectionTimeoutMS=2000&directConnection=true", "db:27017"},
	} {
		got, err := proxyURI(tc.base, proxy, "serverSelectionTimeoutMS=2000")
		if err != nil {
			t.Fatalf("%s: %v", tc.base, err)
		}
		if got != tc.want {
			t.Errorf("proxyURI(%s)\n got %s\nwant %s", tc.base, got, tc.want)
		}
		if target, err := proxyTarget(tc.base); err != nil || target != tc.target {
			t.Errorf("proxyTarget(%s) = %q, %v; want %q", tc.base, target, err, tc.target)
		}
		// What the driver makes of both must differ only in the hosts and
		// directConnection.
		orig, err1 := connstring.ParseAndValidate(tc.base)
		prox, err2 := connstring.ParseAndValidate(got)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v / %v", tc.base, err1, err2)
		}
		if !reflect.DeepEqual(prox.Hosts, []string{proxy}) || !prox.DirectConnection {
			t.Errorf("%s: hosts %v direct %v", got, prox.Hosts, prox.DirectConnection)
		}
		for _, c := range []*connstring.ConnString{orig, prox} {
			c.Original, c.Hosts, c.RawHosts, c.DirectConnection, c.DirectConnectionSet = "", nil, nil, false, false
			c.ServerSelectionTimeout, c.ServerSelectionTimeoutSet = 0, false
			delete(c.Options, "serverselectiontimeoutms")
			if delete(c.Options, "directconnection"); len(c.Options) == 0 {
				c.Options = nil
			}
		}
		ov, pv := reflect.ValueOf(orig).Elem(), reflect.ValueOf(prox).Elem()
		for i := range ov.NumField() {
			if f := ov.Type().Field(i); f.IsExported() && !reflect.DeepEqual(ov.Field(i).Interface(), pv.Field(i).Interface()) {
				t.Errorf("%s: the driver reads %s as %v, the proxy URI as %v", tc.base, f.Name, ov.Field(i), pv.Field(i))
			}
		}
	}
}
