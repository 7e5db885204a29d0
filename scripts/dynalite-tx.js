#!/usr/bin/env node
// dynalite-tx.js: dynalite (an in-memory DynamoDB emulator) with the parts
// of the DynamoDB API that dynalite 4 lacks and the idem DynamoDB store's
// tests need, for tests only:
//
//   - TransactWriteItems (Put, Update, Delete, ConditionCheck; up to 100
//     items; ClientRequestToken idempotency for 10 minutes), answering
//     TransactionCanceledException with CancellationReasons;
//   - ReturnValuesOnConditionCheckFailure: ALL_OLD on PutItem, UpdateItem
//     and DeleteItem (and on transaction items);
//   - UpdateTimeToLive, and DescribeTimeToLive reporting it (items are
//     never deleted by TTL here: as on DynamoDB, deletion is lazy).
//
// Every data operation goes through one queue, one at a time, so a
// transaction is atomic and isolated from every other call. A transaction
// applies its items in order as conditional writes on dynalite, keeping
// each item's old image, and on the first failure undoes what it applied,
// newest first. A ConditionCheck is a conditional DeleteItem whose old
// image is put back at once. DynamoDB reports every failed condition of a
// cancelled transaction; this reports the first (the others say None).
//
// Usage: node dynalite-tx.js --port 8000 [--host 127.0.0.1] --dynalite DIR
// where DIR holds node_modules/dynalite. Dynalite itself listens on a
// random loopback port inside this process. Prints
// "listening on http://HOST:PORT" once ready.
'use strict'

const http = require('http')
const path = require('path')
const zlib = require('zlib')

function arg (name, def) {
  const i = process.argv.indexOf('--' + name)
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def
}

const port = Number(arg('port', '8000'))
const host = arg('host', '127.0.0.1')
const dir = arg('dynalite', process.cwd())
const dynalite = require(path.join(path.resolve(dir), 'node_modules', 'dynalite'))

const PREFIX = 'com.amazonaws.dynamodb.v20120810#'
const keySchemas = new Map() // table name -> [attribute names]
const ttlSpecs = new Map() // table name -> TimeToLiveSpecification
const txTokens = new Map() // ClientRequestToken -> {body, at}
let backendPort = 0

// One queue for every data operation.
let chain = Promise.resolve()
function serial (fn) {
  const p = chain.then(fn)
  chain = p.catch(() => {})
  return p
}

// call sends one operation to dynalite and resolves {status, headers, body}.
function call (op, payload, headers) {
  const data = Buffer.from(JSON.stringify(payload))
  const h = Object.assign({
    'content-type': 'application/x-amz-json-1.0',
    'x-amz-date': '20000101T000000Z',
    authorization: 'AWS4-HMAC-SHA256 Credential=shim/20000101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0',
  }, headers || {})
  h['x-amz-target'] = 'DynamoDB_20120810.' + op
  h['content-length'] = data.length
  delete h['accept-encoding']
  delete h['transfer-encoding']
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: backendPort, method: 'POST', path: '/', headers: h }, res => {
      const chunks = []
      res.on('data', c => chunks.push(c))
      res.on('end', () => {
        const raw = Buffer.concat(chunks)
        let body = {}
        try { body = raw.length ? JSON.parse(raw) : {} }
        catch { body = { raw: raw.toString() } }
        resolve({ status: res.statusCode, headers: res.headers, raw, body })
      })
    })
    req.on('error', reject)
    req.end(data)
  })
}

function errType (r) { return r.status >= 400 ? String(r.body.__type || '').split('#').pop() : '' }

class APIError extends Error {
  constructor (type, message, extra) {
    super(message)
    this.body = Object.assign({ __type: type.includes('#') ? type : PREFIX + type, message }, extra || {})
  }
}

function check (r) {
  if (r.status >= 400) throw new APIError(r.body.__type || 'InternalServerError', r.body.message || r.body.Message || 'error', r.body)
  return r.body
}

async function keyNames (table) {
  if (!keySchemas.has(table)) {
    const d = check(await call('DescribeTable', { TableName: table }))
    keySchemas.set(table, d.Table.KeySchema.map(k => k.AttributeName))
  }
  return keySchemas.get(table)
}

async function keyOf (table, item) {
  const key = {}
  for (const n of await keyNames(table)) key[n] = item[n]
  return key
}

function pick (o, names) {
  const out = {}
  for (const n of names) if (o[n] !== undefined) out[n] = o[n]
  return out
}

const condFields = ['ConditionExpression', 'ExpressionAttributeNames', 'ExpressionAttributeValues']

// A conditional write that failed gets the item as it is, as DynamoDB
// returns it under ReturnValuesOnConditionCheckFailure: ALL_OLD.
async function withOldItem (op, payload) {
  const rv = payload.ReturnValuesOnConditionCheckFailure
  delete payload.ReturnValuesOnConditionCheckFailure
  const r = await call(op, payload)
  if (rv === 'ALL_OLD' && errType(r) === 'ConditionalCheckFailedException') {
    const key = payload.Key || await keyOf(payload.TableName, payload.Item)
    const g = check(await call('GetItem', { TableName: payload.TableName, Key: key, ConsistentRead: true }))
    if (g.Item) r.body.Item = g.Item
    r.raw = Buffer.from(JSON.stringify(r.body))
  }
  return r
}

// applyItem applies one transaction item and returns what undoes it.
async function applyItem (t) {
  if (t.Put) {
    const p = t.Put
    const r = check(await call('PutItem', Object.assign(pick(p, ['TableName', 'Item', ...condFields]), { ReturnValues: 'ALL_OLD' })))
    return { table: p.TableName, key: await keyOf(p.TableName, p.Item), old: r.Attributes }
  }
  if (t.Update) {
    const u = t.Update
    const r = check(await call('UpdateItem', Object.assign(pick(u, ['TableName', 'Key', 'UpdateExpression', ...condFields]), { ReturnValues: 'ALL_OLD' })))
    return { table: u.TableName, key: u.Key, old: r.Attributes }
  }
  if (t.Delete) {
    const d = t.Delete
    const r = check(await call('DeleteItem', Object.assign(pick(d, ['TableName', 'Key', ...condFields]), { ReturnValues: 'ALL_OLD' })))
    return { table: d.TableName, key: d.Key, old: r.Attributes }
  }
  if (t.ConditionCheck) {
    const c = t.ConditionCheck
    const r = check(await call('DeleteItem', Object.assign(pick(c, ['TableName', 'Key', ...condFields]), { ReturnValues: 'ALL_OLD' })))
    if (r.Attributes) check(await call('PutItem', { TableName: c.TableName, Item: r.Attributes }))
    return null
  }
  throw new APIError('ValidationException', 'TransactItems: an item has none of Put, Update, Delete, ConditionCheck')
}

async function undo (u) {
  if (!u) return
  if (u.old) check(await call('PutItem', { TableName: u.table, Item: u.old }))
  else check(await call('DeleteItem', { TableName: u.table, Key: u.key }))
}

function part (t) { return t.Put || t.Update || t.Delete || t.ConditionCheck || {} }

async function transactWriteItems (input) {
  const items = input.TransactItems || []
  if (items.length < 1 || items.length > 100) {
    throw new APIError('ValidationException', `1 validation error detected: Value at 'transactItems' failed to satisfy constraint: Member must have length less than or equal to 100 and greater than or equal to 1 (got ${items.length})`)
  }
  const tok = input.ClientRequestToken
  const fingerprint = JSON.stringify(items)
  if (tok) {
    const seen = txTokens.get(tok)
    if (seen && Date.now() - seen.at < 600e3) {
      if (seen.body !== fingerprint) throw new APIError('IdempotentParameterMismatchException', 'The request uses the same client token as a previous, but non-identical request.')
      return {}
    }
  }
  const seenItems = new Set()
  for (const t of items) {
    const p = part(t)
    const key = t.Put ? await keyOf(p.TableName, p.Item) : p.Key
    const id = p.TableName + '\u0000' + JSON.stringify(Object.keys(key || {}).sort().map(k => [k, key[k]]))
    if (seenItems.has(id)) throw new APIError('ValidationException', 'Transaction request cannot include multiple operations on one item')
    seenItems.add(id)
  }
  const done = []
  for (let i = 0; i < items.length; i++) {
    try {
      done.push(await applyItem(items[i]))
    }
    catch (err) {
      for (let j = done.length - 1; j >= 0; j--) await undo(done[j])
      if (!err.body) throw err
      const type = String(err.body.__type).split('#').pop()
      const reason = type === 'ConditionalCheckFailedException'
        ? { Code: 'ConditionalCheckFailed', Message: 'The conditional request failed' }
        : { Code: 'ValidationError', Message: err.body.message || err.body.Message || type }
      const p = part(items[i])
      if (reason.Code === 'ConditionalCheckFailed' && p.ReturnValuesOnConditionCheckFailure === 'ALL_OLD') {
        const key = items[i].Put ? await keyOf(p.TableName, p.Item) : p.Key
        const g = check(await call('GetItem', { TableName: p.TableName, Key: key, ConsistentRead: true }))
        if (g.Item) reason.Item = g.Item
      }
      const reasons = items.map((_, j) => j === i ? reason : { Code: 'None' })
      throw new APIError('TransactionCanceledException',
        'Transaction cancelled, please refer cancellation reasons for specific reasons [' + reasons.map(r => r.Code).join(', ') + ']',
        { CancellationReasons: reasons })
    }
  }
  if (tok) txTokens.set(tok, { body: fingerprint, at: Date.now() })
  return {}
}

async function updateTimeToLive (input) {
  check(await call('DescribeTable', { TableName: input.TableName }))
  const spec = input.TimeToLiveSpecification || {}
  if (!spec.AttributeName) throw new APIError('ValidationException', 'TimeToLiveSpecification.AttributeName is required')
  if (spec.Enabled) ttlSpecs.set(input.TableName, spec)
  else ttlSpecs.delete(input.TableName)
  return { TimeToLiveSpecification: spec }
}

function send (res, status, body) {
  const data = Buffer.from(JSON.stringify(body))
  res.statusCode = status
  res.setHeader('content-type', 'application/x-amz-json-1.0')
  res.setHeader('content-length', data.length)
  if (zlib.crc32) res.setHeader('x-amz-crc32', zlib.crc32(data))
  res.end(data)
}

function relay (res, r) {
  res.statusCode = r.status
  for (const [k, v] of Object.entries(r.headers)) {
    if (!['content-length', 'x-amz-crc32', 'connection', 'transfer-encoding', 'keep-alive'].includes(k)) res.setHeader(k, v)
  }
  res.setHeader('content-length', r.raw.length)
  if (zlib.crc32) res.setHeader('x-amz-crc32', zlib.crc32(r.raw))
  res.end(r.raw)
}

const serialOps = new Set(['GetItem', 'PutItem', 'UpdateItem', 'DeleteItem', 'BatchGetItem', 'BatchWriteItem', 'Query', 'Scan', 'TransactWriteItems'])

async function handle (op, input, headers) {
  switch (op) {
  case 'TransactWriteItems': return { status: 200, body: await transactWriteItems(input) }
  case 'UpdateTimeToLive': return { status: 200, body: await updateTimeToLive(input) }
  case 'DescribeTimeToLive': {
    const spec = ttlSpecs.get(input.TableName)
    if (spec) return { status: 200, body: { TimeToLiveDescription: { TimeToLiveStatus: 'ENABLED', AttributeName: spec.AttributeName } } }
    return call(op, input, headers)
  }
  case 'PutItem': case 'UpdateItem': case 'DeleteItem': return withOldItem(op, input)
  case 'CreateTable': case 'DeleteTable':
    keySchemas.delete(input.TableName)
    ttlSpecs.delete(input.TableName)
    return call(op, input, headers)
  }
  return call(op, input, headers)
}

function serve (req, res) {
  const chunks = []
  req.on('data', c => chunks.push(c))
  req.on('end', async () => {
    const op = String(req.headers['x-amz-target'] || '').split('.').pop()
    let input
    try { input = JSON.parse(Buffer.concat(chunks).toString() || '{}') }
    catch { return send(res, 400, { __type: 'com.amazon.coral.service#SerializationException' }) }
    const headers = pick(req.headers, ['authorization', 'x-amz-date', 'content-type'])
    try {
      const run = () => handle(op, input, headers)
      const r = await (serialOps.has(op) ? serial(run) : run())
      if (r.raw) relay(res, r)
      else send(res, r.status, r.body)
    }
    catch (err) {
      if (err.body) send(res, 400, err.body)
      else send(res, 500, { __type: PREFIX + 'InternalServerError', message: String(err && err.stack || err) })
    }
  })
}

const backend = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })
backend.listen(0, '127.0.0.1', () => {
  backendPort = backend.address().port
  const front = http.createServer(serve)
  front.keepAliveTimeout = 60e3
  front.listen(port, host, () => {
    const a = front.address()
    console.log(`listening on http://${host.includes(':') ? '[' + host + ']' : host}:${a.port}`)
  })
})
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0))
