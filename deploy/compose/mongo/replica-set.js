// Healthcheck of docker-compose.yml's MongoDB: initiates the single-node
// replica set on the first run, then exits 0 only once this node is primary.
// scorerefresh waits for that (depends_on: service_healthy), so it finds
// change streams available from its first claim.
//
// The member's host is the compose service name, which the other containers
// resolve; the replica set name is the one of mongod's --replSet and of
// MONGODB_URI. From the host machine, connect with directConnection=true:
//   mongosh "mongodb://localhost:27017/?directConnection=true"
try {
  rs.status();
} catch (err) {
  if (err.codeName !== "NotYetInitialized") {
    throw err;
  }
  rs.initiate({ _id: "rs0", members: [{ _id: 0, host: "mongo:27017" }] });
}
if (!db.hello().isWritablePrimary) {
  quit(1);
}
