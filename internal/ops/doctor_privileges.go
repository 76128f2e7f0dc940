package ops

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// privilege is one entry of connectionStatus's authenticatedUserPrivileges.
type privilege struct {
	Resource struct {
		DB          *string `bson:"db"`
		Collection  *string `bson:"collection"`
		Cluster     bool    `bson:"cluster"`
		AnyResource bool    `bson:"anyResource"`
	} `bson:"resource"`
	Actions []string `bson:"actions"`
}

// need is an action on a collection of the configured database; an empty
// collection means the database itself, "cluster" the cluster resource.
type need struct {
	coll, action string
}

// grants reports whether the privileges allow action on db.coll, by
// MongoDB's resource rules: an empty db or collection in a privilege means
// every one, anyResource means everything, cluster only the cluster.
func grants(privs []privilege, db string, n need) bool {
	for _, p := range privs {
		if !slices.Contains(p.Actions, n.action) && !slices.Contains(p.Actions, "anyAction") {
			continue
		}
		r := p.Resource
		switch {
		case r.AnyResource || n.coll == "cluster" && r.Cluster:
			return true
		case n.coll == "cluster" || r.Cluster || r.DB == nil || r.Collection == nil:
			continue
		case (*r.DB == "" || *r.DB == db) && (*r.Collection == "" || *r.Collection == n.coll):
			return true
		}
	}
	return false
}

// needs returns what each group of operations requires: the service (every
// operation of `scorerefresh run`), its change stream (optional: polling
// replaces it), and the operator commands.
func needs(cfg DoctorConfig) (service, stream, operator []need) {
	c := cfg.Colls
	// Literal need{collection, action} forms: deploy's tests read them
	// from this source to check the role docs/adopting.md creates.
	service = []need{
		{c.Queue.Name(), "find"}, {c.Queue.Name(), "remove"}, {c.Queue.Name(), "createIndex"},
		{c.Claims.Name(), "find"}, {c.Claims.Name(), "insert"}, {c.Claims.Name(), "update"}, {c.Claims.Name(), "remove"},
		{c.Claims.Name(), "createIndex"}, {c.DeadLetter.Name(), "find"}, {c.DeadLetter.Name(), "insert"}, {c.DeadLetter.Name(), "createIndex"},
		{c.Scores.Name(), "find"}, {c.Scores.Name(), "insert"}, {c.Scores.Name(), "update"},
	}
	for _, src := range cfg.Rules.Collections() {
		service = append(service, need{src, "find"})
	}
	stream = []need{{c.Queue.Name(), "changeStream"}}
	operator = []need{
		{c.Queue.Name(), "insert"}, {c.DeadLetter.Name(), "remove"}, {"", "listCollections"},
		{c.Queue.Name(), "listIndexes"}, {c.Claims.Name(), "listIndexes"}, {c.DeadLetter.Name(), "listIndexes"},
		{"cluster", "serverStatus"},
	}
	return service, stream, operator
}

// privilegeChecks reads the connected user's privileges (connectionStatus
// with showPrivileges: nothing is attempted or changed) and checks every
// action the service and the operator commands perform.
func privilegeChecks(ctx context.Context, cfg DoctorConfig) []Check {
	cmd := bson.D{{Key: "connectionStatus", Value: 1}, {Key: "showPrivileges", Value: true}}
	raw, err := cfg.Colls.DB.Client().Database("admin").RunCommand(ctx, cmd).Raw()
	if err != nil {
		return []Check{{Name: "permissions", Status: Warn, Detail: "connectionStatus failed: " + err.Error()}}
	}
	users, privs, err := parseConnectionStatus(raw)
	if err != nil {
		return []Check{{Name: "permissions", Status: Warn, Detail: err.Error()}}
	}
	if len(users) == 0 {
		return []Check{{Name: "permissions", Status: Warn,
			Detail: "no authenticated user: the server runs without access control (everything is allowed) or cannot say; nothing to check",
			Fix:    "production servers should require authentication (Atlas always does)"}}
	}
	who, db := strings.Join(users, ", "), cfg.Colls.DB.Name()
	service, stream, operator := needs(cfg)
	check := func(name string, ns []need, level, fix string) Check {
		var gaps []string
		for _, n := range ns {
			if where := map[string]string{"": "database " + db, "cluster": "the cluster"}[n.coll]; !grants(privs, db, n) {
				gaps = append(gaps, n.action+" on "+cmp.Or(where, db+"."+n.coll))
			}
		}
		if len(gaps) == 0 {
			return Check{Name: name, Status: OK, Detail: "everything needed is granted to " + who}
		}
		return Check{Name: name, Status: level, Detail: who + " lacks " + strings.Join(gaps, ", "), Fix: fix}
	}
	return []Check{
		check("permissions: service", service, Fail,
			fmt.Sprintf("grant the readWrite role on %s (or a custom role with these actions)", db)),
		check("permissions: change stream", stream, Warn,
			"grant changeStream on the queue (readWrite includes it); without it the consumer polls"),
		check("permissions: operator commands", operator, Warn,
			"redrive needs insert on the queue, purge and redrive remove on the dead letters, doctor listIndexes and listCollections, and serverStatus (clusterMonitor) for the connection check"),
	}
}

// parseConnectionStatus reads the authenticated users (user@db) and their
// privileges; a field of another type is an error, not a panic.
func parseConnectionStatus(raw bson.Raw) (users []string, privs []privilege, err error) {
	var status struct {
		AuthInfo struct {
			Users []struct {
				User string `bson:"user"`
				DB   string `bson:"db"`
			} `bson:"authenticatedUsers"`
			Privileges []privilege `bson:"authenticatedUserPrivileges"`
		} `bson:"authInfo"`
	}
	if err := bson.Unmarshal(raw, &status); err != nil {
		return nil, nil, fmt.Errorf("reading connectionStatus: %w", err)
	}
	for _, u := range status.AuthInfo.Users {
		users = append(users, u.User+"@"+u.DB)
	}
	return users, status.AuthInfo.Privileges, nil
}
