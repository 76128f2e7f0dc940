// An external scorer for scorerefresh (SCORER_URL), in Node.js with only
// node:http and the official MongoDB driver: how a TypeScript or JavaScript
// team puts its existing score behind the service. A user's score is two
// points per activity document plus the sum of their points, read from
// user_activity (the collection the demo seeds), as examples/goscorer does.
//
//   MONGODB_URI=mongodb://... MONGODB_DATABASE=app SCORER_TOKEN=... PORT=8080 node server.js
//
// It prints "listening on http://127.0.0.1:PORT" once it accepts requests.
'use strict';

const http = require('node:http');
const { MongoClient } = require('mongodb');

const uri = process.env.MONGODB_URI || 'mongodb://localhost:27017';
const database = process.env.MONGODB_DATABASE || 'app';
const token = process.env.SCORER_TOKEN || '';
const port = Number(process.env.PORT || 0);

const client = new MongoClient(uri, { readPreference: 'primary' });
const activity = client.db(database).collection('user_activity');

// score answers the protocol of docs/scorers.md for one request body.
async function score(body) {
  const users = body.users;
  const asOf = new Date(body.asOf);
  if (!Array.isArray(users) || users.some((u) => typeof u !== 'string') || isNaN(asOf)) {
    throw Object.assign(new Error('want {"users": [strings], "asOf": date}'), { status: 400 });
  }
  const docs = await activity
    .find({ username: { $in: users }, at: { $lte: asOf } }, { projection: { username: 1, points: 1 } })
    .toArray();
  const events = new Map();
  const points = new Map();
  for (const d of docs) {
    events.set(d.username, (events.get(d.username) || 0) + 1);
    points.set(d.username, (points.get(d.username) || 0) + (typeof d.points === 'number' ? d.points : 0));
  }
  const scores = {};
  for (const u of users) {
    const e = events.get(u) || 0;
    const p = points.get(u) || 0;
    scores[u] = { score: 2 * e + p, components: { events: e, points: p } };
  }
  return { scores, errors: {} };
}

const server = http.createServer((req, res) => {
  const fail = (status, message) => {
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ error: message }));
  };
  if (req.method !== 'POST') return fail(405, 'POST only');
  if (token && req.headers.authorization !== `Bearer ${token}`) return fail(401, 'bad token');
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      return fail(400, 'the body is not JSON');
    }
    try {
      const answer = await score(body);
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(answer));
    } catch (err) {
      fail(err.status || 500, err.message);
    }
  });
});

async function main() {
  await client.connect();
  server.listen(port, '127.0.0.1', () => {
    console.log(`listening on http://127.0.0.1:${server.address().port}`);
  });
  const stop = () => server.close(() => client.close().then(() => process.exit(0)));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
