-- pi-workflows-state, schema version 1.
--
-- Alpha state policy: this file is edited in place. Its SHA-256 digest is stored in
-- schema_meta; a database created from any other text is refused before mutation with
-- the backup-and-reset instruction. There are no migrations.
--
-- Conventions: every table is STRICT; times are UTC milliseconds since the Unix epoch
-- (`*_at`); `*_hash` columns hold lowercase hex SHA-256 digests of canonical JSON or of
-- blob bytes; content itself lives in `blobs` or `run_view_content`. A closed set of three
-- or more values is checked as an `OR` chain (`<>` with `AND` when negated), never as
-- `IN (…)`: SQLite builds a temporary b-tree for such a list on every statement that checks
-- it, which was ~3 % of the server's CPU on a run's writes.

CREATE TABLE schema_meta (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  schema_name TEXT NOT NULL CHECK (schema_name = 'pi-workflows-state'),
  schema_version INTEGER NOT NULL CHECK (schema_version = 1),
  schema_digest TEXT NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;

-- Content-addressed values (receipts, outputs, errors, transfer content). A reference names
-- the digest and the media type, so the same bytes may be stored as two representations.
CREATE TABLE blobs (
  blob_hash TEXT NOT NULL CHECK (length(blob_hash) = 64),
  media_type TEXT NOT NULL CHECK (length(media_type) BETWEEN 1 AND 128),
  byte_length INTEGER NOT NULL CHECK (byte_length >= 0),
  content BLOB NOT NULL CHECK (length(content) = byte_length),
  created_at INTEGER NOT NULL,
  PRIMARY KEY (blob_hash, media_type)
) STRICT;

-- Runs and queue -------------------------------------------------------------------------

CREATE TABLE runs (
  run_id TEXT PRIMARY KEY CHECK (length(run_id) BETWEEN 1 AND 256),
  workflow_name TEXT NOT NULL,
  project_path TEXT NOT NULL,
  parent_run_id TEXT REFERENCES runs (run_id),
  root_run_id TEXT NOT NULL,
  -- How the run began: its runner's first command is `start`, `restart` or `continue`.
  origin TEXT NOT NULL DEFAULT 'start' CHECK (origin = 'start' OR origin = 'restart'
    OR origin = 'continuation'),
  -- A continuation names its waiting checkpoint parent attempt.
  parent_attempt_id TEXT,
  definition_digest TEXT NOT NULL,
  -- The workflow source identity (root and mounted file hashes), canonical JSON.
  workflow_source_json TEXT NOT NULL DEFAULT '{}' CHECK (length(workflow_source_json) <= 65536),
  input_hash TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status = 'queued' OR status = 'running' OR status = 'waiting'
    OR status = 'completed' OR status = 'failed' OR status = 'timed_out'
    OR status = 'cancelled'),
  paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
  -- Why the run stopped or parked: a failure-class code such as runnerNoProgress.
  status_detail TEXT,
  -- The resource revision: bumped by every lifecycle or protected write, never reused.
  revision INTEGER NOT NULL CHECK (revision >= 1),
  -- What its view shows besides the revision (runner epochs, step updates, settings, turns),
  -- counted by every write that changes it (src/store/presentation.rs): the presentation
  -- revision is revision + presentation_changes, one row's read at any length.
  presentation_changes INTEGER NOT NULL DEFAULT 0 CHECK (presentation_changes >= 0),
  output_hash TEXT,
  error_hash TEXT,
  -- Its node attempts, all and completed, kept with every write that adds or completes one
  -- (src/store/attempts.rs): a view or the run list reads a long run's progress here
  -- instead of counting its whole history.
  attempt_count INTEGER NOT NULL DEFAULT 0,
  completed_attempt_count INTEGER NOT NULL DEFAULT 0
    CHECK (completed_attempt_count BETWEEN 0 AND attempt_count),
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  finished_at INTEGER,
  CHECK ((finished_at IS NOT NULL) = (status = 'completed' OR status = 'failed'
    OR status = 'timed_out' OR status = 'cancelled')),
  CHECK ((origin = 'continuation') = (parent_attempt_id IS NOT NULL)),
  CHECK (origin = 'start' OR parent_run_id IS NOT NULL)
) STRICT;

CREATE INDEX runs_by_root ON runs (root_run_id);
-- Partial: most runs have no parent, and an index entry for NULL would only cost writes.
CREATE INDEX runs_by_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
-- The run list, newest first.
CREATE INDEX runs_by_created ON runs (created_at, run_id);

CREATE TABLE run_bindings (
  run_id TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
  execution_mode TEXT NOT NULL CHECK (execution_mode IN ('interactive', 'headless')),
  origin_session_id TEXT,
  CHECK ((execution_mode = 'interactive') = (origin_session_id IS NOT NULL))
) STRICT;

-- A session view finds its newest run (active, or a retained terminal one). Headless runs
-- have no session and no entry.
CREATE INDEX run_bindings_by_session ON run_bindings (origin_session_id)
  WHERE origin_session_id IS NOT NULL;

CREATE TABLE run_queue (
  run_id TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
  status TEXT NOT NULL CHECK (status = 'queued' OR status = 'starting' OR status = 'running'
    OR status = 'parked' OR status = 'done' OR status = 'failed' OR status = 'cancelled'),
  available_at INTEGER NOT NULL,
  -- The origin-session reservation of an interactive run (NULL for headless runs).
  origin_session_id TEXT,
  consecutive_errors INTEGER NOT NULL DEFAULT 0 CHECK (consecutive_errors >= 0),
  updated_at INTEGER NOT NULL
) STRICT;

CREATE INDEX run_queue_admission ON run_queue (status, available_at);

-- An interactive run holds its origin-session reservation until it is terminal.
CREATE UNIQUE INDEX run_queue_one_active_per_session ON run_queue (origin_session_id)
  WHERE origin_session_id IS NOT NULL AND status <> 'done' AND status <> 'failed'
    AND status <> 'cancelled';

-- Claims ---------------------------------------------------------------------------------

-- One row per claimable resource. The row outlives its holders so `generation` only grows;
-- a released claim keeps its generation and clears every holder column. For the server
-- lease (resource_type 'server') the generation is the server epoch.
CREATE TABLE leases (
  resource_type TEXT NOT NULL CHECK (resource_type IN ('run', 'server')),
  resource_id TEXT NOT NULL,
  generation INTEGER NOT NULL CHECK (generation >= 1),
  owner_type TEXT CHECK (owner_type = 'host' OR owner_type = 'control' OR owner_type = 'server'),
  owner_id TEXT,
  token_hash TEXT CHECK (length(token_hash) = 64),
  acquired_at INTEGER,
  heartbeat_at INTEGER,
  expires_at INTEGER,
  PRIMARY KEY (resource_type, resource_id),
  CHECK (
    (owner_type IS NULL AND owner_id IS NULL AND token_hash IS NULL
      AND acquired_at IS NULL AND heartbeat_at IS NULL AND expires_at IS NULL)
    OR
    (owner_type IS NOT NULL AND owner_id IS NOT NULL AND token_hash IS NOT NULL
      AND acquired_at IS NOT NULL AND heartbeat_at IS NOT NULL AND expires_at IS NOT NULL
      AND expires_at > heartbeat_at)
  )
) STRICT;

-- Events and viewer deltas ---------------------------------------------------------------

-- Keyed by run and revision (WITHOUT ROWID: one b-tree, so an event costs one page write).
CREATE TABLE events (
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  resource_revision INTEGER NOT NULL,
  event_type TEXT NOT NULL,
  actor_type TEXT NOT NULL CHECK (actor_type = 'host' OR actor_type = 'control'
    OR actor_type = 'client' OR actor_type = 'system'),
  lease_generation INTEGER,
  payload_hash TEXT,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, resource_revision)
) STRICT, WITHOUT ROWID;

-- Events are immutable; whole run trees are removed only by retention.
CREATE TRIGGER events_are_immutable BEFORE UPDATE ON events
BEGIN
  SELECT RAISE(ABORT, 'events are immutable');
END;

CREATE TABLE viewer_deltas (
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  resource_revision INTEGER NOT NULL,
  delta_kind TEXT NOT NULL,
  -- Canonical JSON, bounded by the writer (VIEWER_DELTA_BYTES_MAX).
  delta_json TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, resource_revision)
) STRICT, WITHOUT ROWID;

-- Attempts -------------------------------------------------------------------------------

CREATE TABLE node_attempts (
  attempt_id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  node_id TEXT NOT NULL,
  -- Full compiled node path (include mounts) and visit number: the effect key inputs.
  node_path TEXT NOT NULL,
  visit INTEGER NOT NULL CHECK (visit >= 1),
  node_type TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status = 'running' OR status = 'waiting' OR status = 'interrupted'
    OR status = 'completed' OR status = 'failed' OR status = 'timed_out'
    OR status = 'cancelled'),
  lease_generation INTEGER NOT NULL,
  started_at INTEGER NOT NULL,
  finished_at INTEGER,
  deadline_at INTEGER,
  timeout_ms INTEGER,
  output_hash TEXT,
  error_hash TEXT,
  -- The settings change number whose frozen copy this attempt saw (NULL: no settings declared).
  settings_change_number INTEGER CHECK (settings_change_number IS NULL OR settings_change_number >= 0),
  -- A small output or error itself (canonical JSON, its digest the *_hash), instead of a blob
  -- keyed by a random digest (src/store/blobs.rs, INLINE_JSON_BYTES_MAX).
  output_inline BLOB CHECK (output_inline IS NULL OR (output_hash IS NOT NULL AND length(output_inline) <= 1024)),
  error_inline BLOB CHECK (error_inline IS NULL OR (error_hash IS NOT NULL AND length(error_inline) <= 1024)),
  CHECK ((finished_at IS NULL) = (status IN ('running', 'waiting')))
) STRICT;

-- The one unfinished attempt is the durable source of a run's current node.
CREATE UNIQUE INDEX node_attempts_one_unfinished_per_run ON node_attempts (run_id)
  WHERE status IN ('running', 'waiting');

-- Per-run reads (status, run state) and the cascade when a run is pruned: every child table
-- of runs is indexed by run, so neither ever scans other runs' rows.
CREATE INDEX node_attempts_by_run ON node_attempts (run_id, status);

-- The deadline task's looks (every second while anything commits): only running steps with a
-- deadline, so a look reads the live few, never the whole history.
CREATE INDEX node_attempts_running_deadlines ON node_attempts (deadline_at)
  WHERE status = 'running' AND deadline_at IS NOT NULL;

-- A run's attempt counts (runs.attempt_count, runs.completed_attempt_count) count its
-- attempts per run, so an attempt never moves to another run. (The store keeps the counts
-- with the statements that insert and complete attempts, src/store/attempts.rs, not with
-- triggers: a trigger on node_attempts made every write of it keep a statement journal,
-- +10 µs a step.)
CREATE TRIGGER node_attempts_stay_in_their_run BEFORE UPDATE OF run_id ON node_attempts
  WHEN NEW.run_id != OLD.run_id
BEGIN
  SELECT RAISE(ABORT, 'an attempt never moves to another run');
END;

-- Human decisions ------------------------------------------------------------------------

-- A protected decision (`humanDecision`): its decision ID is its interactive request's ID.
-- `request_digest` binds subject, presentation, title, answer revision, choices with their
-- prompts, deadline and default (src/decision); the subject is stored but never presented.
CREATE TABLE human_decisions (
  decision_id TEXT PRIMARY KEY REFERENCES interactive_requests (request_id) ON DELETE CASCADE,
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  attempt_id TEXT NOT NULL REFERENCES node_attempts (attempt_id) ON DELETE CASCADE,
  audience TEXT NOT NULL CHECK (length(audience) BETWEEN 1 AND 64),
  request_digest TEXT NOT NULL,
  subject_hash TEXT NOT NULL,
  presentation_hash TEXT NOT NULL,
  deadline_at INTEGER,
  default_response_hash TEXT,
  created_at INTEGER NOT NULL,
  UNIQUE (run_id, request_digest)
) STRICT;

CREATE INDEX human_decisions_by_run ON human_decisions (run_id);
CREATE INDEX human_decisions_by_attempt ON human_decisions (attempt_id);

-- At most one winner per decision (the primary key).
CREATE TABLE human_decision_resolutions (
  decision_id TEXT PRIMARY KEY REFERENCES human_decisions (decision_id) ON DELETE CASCADE,
  outcome TEXT NOT NULL CHECK (outcome IN ('accepted', 'cancelled')),
  provenance TEXT NOT NULL CHECK (provenance = 'human' OR provenance = 'timeout_policy'
    OR provenance = 'explicit_cancel' OR provenance = 'expired_no_default'
    OR provenance = 'run_ended'),
  response_hash TEXT,
  resolved_at INTEGER NOT NULL
) STRICT;

-- Channels -------------------------------------------------------------------------------

-- One adapter child per Telegram profile; each launch takes the next epoch, so a frame or
-- settlement of an older launch (or an older server's) is refused.
CREATE TABLE channel_adapters (
  profile TEXT PRIMARY KEY CHECK (length(profile) BETWEEN 1 AND 64),
  epoch INTEGER NOT NULL CHECK (epoch >= 1),
  launched_at INTEGER NOT NULL
) STRICT;

-- A decision's presentation in one chat of one profile: the decision feature record for
-- delivery and settlement. The sends and edits themselves are managed effects (owner
-- `channel`): their attempts, ambiguity and Telegram message references live there only.
CREATE TABLE channel_messages (
  channel_message_id TEXT PRIMARY KEY,
  decision_id TEXT NOT NULL REFERENCES human_decisions (decision_id) ON DELETE CASCADE,
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  profile TEXT NOT NULL,
  chat_id INTEGER NOT NULL,
  -- Opaque, server-made: the only thing a button's callback data names.
  nonce TEXT NOT NULL UNIQUE,
  -- The presented revision: 1 when sent, 2 once the closing edit applied.
  channel_revision INTEGER NOT NULL DEFAULT 0 CHECK (channel_revision >= 0),
  -- `pending`: to send; `presented`: sent and open; `closed`: its closing edit applied;
  -- `failed`: the send was refused for good (the decision stays answerable elsewhere).
  state TEXT NOT NULL CHECK (state = 'pending' OR state = 'presented' OR state = 'closed'
    OR state = 'failed'),
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  UNIQUE (decision_id, profile, chat_id)
) STRICT;

CREATE INDEX channel_messages_by_profile ON channel_messages (profile, state);
CREATE INDEX channel_messages_by_run ON channel_messages (run_id);
CREATE INDEX channel_messages_open ON channel_messages (state) WHERE state = 'pending' OR state = 'presented';

-- Effects --------------------------------------------------------------------------------

CREATE TABLE effects (
  effect_id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  effect_type TEXT NOT NULL,
  -- Derived by the engine from run ID, effect type, node path and visit; never by workflow code.
  idempotency_key TEXT NOT NULL,
  request_fingerprint TEXT NOT NULL,
  -- The workflow's contract (spec "Effects and retry safety"): after an uncertain crash an
  -- idempotent effect is applied again with its key, a read-back effect is observed first,
  -- a manual one becomes ambiguous.
  recovery TEXT NOT NULL CHECK (recovery = 'idempotent' OR recovery = 'readBack'
    OR recovery = 'manual'),
  -- Who executes it: the run's runner (a workflow node), or a channel adapter presenting a
  -- decision (docs/CHANNELS.md). A runner's lifecycle (its death, a review, resume gating)
  -- touches only its own; a channel adapter's death only the channel's.
  owner TEXT NOT NULL DEFAULT 'runner' CHECK (owner IN ('runner', 'channel')),
  -- A channel effect's presentation (its profile and chat); absent for a runner's.
  channel_message_id TEXT REFERENCES channel_messages (channel_message_id) ON DELETE CASCADE,
  -- The node attempt that reserved it (its node path and visit name it for review).
  attempt_id TEXT,
  -- A short, non-secret description for review (e.g. a command name), at most 200 bytes.
  request_summary TEXT CHECK (request_summary IS NULL OR length(CAST(request_summary AS BLOB)) <= 200),
  status TEXT NOT NULL CHECK (status = 'pending' OR status = 'applying' OR status = 'applied'
    OR status = 'rejected' OR status = 'ambiguous' OR status = 'cancelled'),
  attempt_count INTEGER NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
  result_hash TEXT,
  external_ref TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  UNIQUE (run_id, effect_type, idempotency_key),
  CHECK ((owner = 'channel') = (channel_message_id IS NOT NULL))
) STRICT;

CREATE INDEX effects_by_channel_message ON effects (channel_message_id, status);
-- The idle check (every few seconds on a server without clients) counts the unsettled
-- effects, channel messages and submissions alone, never the settled history.
CREATE INDEX effects_unsettled ON effects (status) WHERE status = 'pending' OR status = 'applying';

CREATE TABLE effect_attempts (
  effect_id TEXT NOT NULL REFERENCES effects (effect_id) ON DELETE CASCADE,
  attempt_number INTEGER NOT NULL CHECK (attempt_number >= 1),
  runner_epoch TEXT,
  lease_generation INTEGER NOT NULL,
  outcome TEXT CHECK (outcome = 'applied' OR outcome = 'rejected' OR outcome = 'ambiguous'
    OR outcome = 'interrupted' OR outcome = 'cancelled'),
  -- How an ambiguous attempt was settled by an operator's review (NULL: not reviewed).
  review TEXT CHECK (review IS NULL OR (outcome = 'ambiguous' AND (review = 'applied'
    OR review = 'retry' OR review = 'failed'))),
  started_at INTEGER NOT NULL,
  finished_at INTEGER,
  PRIMARY KEY (effect_id, attempt_number),
  CHECK ((outcome IS NULL) = (finished_at IS NULL))
) STRICT;

-- Interactions ---------------------------------------------------------------------------

CREATE TABLE interactive_requests (
  request_id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  attempt_id TEXT NOT NULL UNIQUE REFERENCES node_attempts (attempt_id) ON DELETE CASCADE,
  target_session_id TEXT,
  kind TEXT NOT NULL CHECK (kind = 'agent' OR kind = 'assistant' OR kind = 'checkpoint'
    OR kind = 'decision'),
  contract_hash TEXT NOT NULL,
  -- The answer revision: a resume of a paused agent or assistant step increments it (the
  -- step is presented again as a fresh turn); a decision's never changes.
  revision INTEGER NOT NULL DEFAULT 1 CHECK (revision >= 1),
  -- `cancelled` also closes a step whose attempt failed `missingSubmission` (the attempt
  -- carries the error); `timed_out`: its deadline fired (the attempt is `timed_out`).
  status TEXT NOT NULL CHECK (status = 'pending' OR status = 'settled' OR status = 'cancelled'
    OR status = 'timed_out'),
  accepted_submission_id TEXT,
  -- Origin-session turns that ended with the step still pending, not paused and without an
  -- accepted or validating submission (at most 3: the third fails the attempt).
  unproductive_turn_ends INTEGER NOT NULL DEFAULT 0 CHECK (unproductive_turn_ends BETWEEN 0 AND 3),
  created_at INTEGER NOT NULL,
  settled_at INTEGER,
  CHECK ((settled_at IS NULL) = (status = 'pending'))
) STRICT;

CREATE INDEX interactive_requests_by_run ON interactive_requests (run_id, status);
-- A branch report looks up the session's pending requests.
CREATE INDEX interactive_requests_by_session ON interactive_requests (target_session_id, status);
-- The deadline task's looks at every pending step, oldest first, without the settled history.
CREATE INDEX interactive_requests_pending ON interactive_requests (created_at) WHERE status = 'pending';

-- Model time a pending agent or assistant step used (docs/SESSIONS.md "Deadlines"): one
-- interval per stretch of a reported Pi model turn in a connected session. `elapsed_ms` grows
-- only by the server's own observations (each step bounded, so a clock jump, a suspended
-- server or its downtime adds nothing); a closed interval never grows. The step's
-- `timeout_ms` is spent when the sum of its intervals reaches it.
CREATE TABLE active_intervals (
  request_id TEXT NOT NULL REFERENCES interactive_requests (request_id) ON DELETE CASCADE,
  interval_number INTEGER NOT NULL CHECK (interval_number >= 1),
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  target_session_id TEXT NOT NULL,
  turn_id TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('open', 'closed')),
  started_at INTEGER NOT NULL,
  observed_at INTEGER NOT NULL CHECK (observed_at >= started_at),
  elapsed_ms INTEGER NOT NULL DEFAULT 0 CHECK (elapsed_ms >= 0),
  PRIMARY KEY (request_id, interval_number)
) STRICT, WITHOUT ROWID;

-- One interval grows at a time per step; the deadline task reads the open ones.
CREATE UNIQUE INDEX active_intervals_one_open ON active_intervals (request_id) WHERE status = 'open';
CREATE INDEX active_intervals_open ON active_intervals (status, observed_at) WHERE status = 'open';
CREATE INDEX active_intervals_by_run ON active_intervals (run_id);

-- Progress an agent step reports while its request is pending (`interaction.update`): the
-- latest value per (type, key); updates never route or complete a node.
CREATE TABLE interaction_updates (
  request_id TEXT NOT NULL REFERENCES interactive_requests (request_id) ON DELETE CASCADE,
  update_type TEXT NOT NULL CHECK (length(update_type) BETWEEN 1 AND 64),
  update_key TEXT NOT NULL CHECK (length(update_key) BETWEEN 1 AND 128),
  update_seq INTEGER NOT NULL CHECK (update_seq >= 1),
  data_hash TEXT NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (request_id, update_type, update_key)
) STRICT, WITHOUT ROWID;

CREATE TABLE interactive_submissions (
  submission_id TEXT PRIMARY KEY,
  request_id TEXT NOT NULL REFERENCES interactive_requests (request_id) ON DELETE CASCADE,
  idempotency_key TEXT NOT NULL,
  payload_hash TEXT NOT NULL,
  outcome TEXT NOT NULL CHECK (outcome = 'validating' OR outcome = 'accepted'
    OR outcome = 'rejected'),
  receipt_hash TEXT,
  submitted_at INTEGER NOT NULL,
  settled_at INTEGER,
  UNIQUE (request_id, idempotency_key)
) STRICT;

CREATE INDEX interactive_submissions_validating ON interactive_submissions (request_id)
  WHERE outcome = 'validating';

-- Messages -------------------------------------------------------------------------------

CREATE TABLE workflow_messages (
  workflow_message_id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  target_session_id TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind = 'step' OR kind = 'decision' OR kind = 'notification'
    OR kind = 'terminal' OR kind = 'followUp'),
  -- The source record: an interactive request, decision, notification node, run or follow-up.
  source_id TEXT NOT NULL,
  reason TEXT CHECK (reason = 'initial' OR reason = 'reminder' OR reason = 'resumed'),
  content_hash TEXT NOT NULL,
  order_number INTEGER NOT NULL CHECK (order_number >= 1),
  status TEXT NOT NULL CHECK (status = 'pending' OR status = 'sent' OR status = 'cancelled'),
  pi_session_entry_id TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  UNIQUE (target_session_id, order_number),
  CHECK ((status = 'sent') = (pi_session_entry_id IS NOT NULL)),
  CHECK ((kind = 'step') = (reason IS NOT NULL)),
  -- A terminal message's source is its own run.
  CHECK (kind != 'terminal' OR source_id = run_id)
) STRICT;

CREATE INDEX workflow_messages_by_run ON workflow_messages (run_id, status);
-- The session window (pending and recovery messages, in order) and per-source lookups.
CREATE INDEX workflow_messages_by_session ON workflow_messages (target_session_id, status, order_number);
CREATE INDEX workflow_messages_by_source ON workflow_messages (source_id, kind, status);

-- At most one pending step message for one interactive request.
CREATE UNIQUE INDEX workflow_messages_one_pending_step ON workflow_messages (source_id)
  WHERE kind = 'step' AND status = 'pending';

-- One exact Pi model turn the server accepted as workflow work (docs/SESSIONS.md). The
-- extension makes the turn ID at `agent_start`; it is unique within its session. A turn
-- ends `ended` with the outcome Pi reported, or `lost` when the server proved it gone (an
-- idle branch report, a newer start in the session, or its run's end).
CREATE TABLE workflow_turns (
  target_session_id TEXT NOT NULL,
  turn_id TEXT NOT NULL CHECK (length(turn_id) BETWEEN 1 AND 256),
  workflow_message_id TEXT NOT NULL REFERENCES workflow_messages (workflow_message_id) ON DELETE CASCADE,
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  status TEXT NOT NULL CHECK (status = 'open' OR status = 'ended' OR status = 'lost'),
  outcome TEXT CHECK (outcome = 'completed' OR outcome = 'aborted' OR outcome = 'error'),
  response_entry_id TEXT CHECK (response_entry_id IS NULL OR length(response_entry_id) BETWEEN 1 AND 256),
  started_at INTEGER NOT NULL,
  ended_at INTEGER,
  PRIMARY KEY (target_session_id, turn_id),
  CHECK ((status = 'open') = (ended_at IS NULL)),
  CHECK ((status = 'ended') = (outcome IS NOT NULL)),
  CHECK (response_entry_id IS NULL OR status = 'ended'),
  CHECK (ended_at IS NULL OR ended_at >= started_at)
) STRICT, WITHOUT ROWID;

-- Pi runs one model turn at a time: at most one open turn per session.
CREATE UNIQUE INDEX workflow_turns_one_open_per_session ON workflow_turns (target_session_id)
  WHERE status = 'open';
CREATE INDEX workflow_turns_by_message ON workflow_turns (workflow_message_id, started_at);
CREATE INDEX workflow_turns_by_run ON workflow_turns (run_id, status);

-- Per session, the terminal run `sessionView.clearTerminal` removed from the view, so a
-- cleared terminal view stays cleared (a view fact only: no workflow state).
CREATE TABLE session_views (
  target_session_id TEXT PRIMARY KEY,
  cleared_run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  cleared_at INTEGER NOT NULL
) STRICT;

CREATE INDEX session_views_by_run ON session_views (cleared_run_id);

-- Settings -------------------------------------------------------------------------------

-- A run's changeable settings, only when its workflow declares them: the declaration
-- (initial value and granted paths, a JSON blob) and the current change number. A restart
-- starts from its parent run's current settings.
CREATE TABLE run_settings (
  run_id TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
  declaration_hash TEXT NOT NULL,
  change_number INTEGER NOT NULL CHECK (change_number >= 0),
  updated_at INTEGER NOT NULL
) STRICT;

-- Every version of a run's settings: change 0 is the starting copy (the declaration's
-- initial value, or `inherited` from the run a restart came from), each later one a
-- client's JSON Patch (RFC 6902). An attempt names the version it saw.
CREATE TABLE run_setting_changes (
  run_id TEXT NOT NULL REFERENCES run_settings (run_id) ON DELETE CASCADE,
  change_number INTEGER NOT NULL CHECK (change_number >= 0),
  actor TEXT NOT NULL CHECK (actor = 'workflow' OR actor = 'inherited' OR actor = 'human'
    OR actor = 'session'),
  patch_hash TEXT,
  settings_hash TEXT NOT NULL,
  changed_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, change_number),
  CHECK ((change_number = 0) = (patch_hash IS NULL)),
  CHECK ((change_number = 0) = (actor IN ('workflow', 'inherited')))
) STRICT, WITHOUT ROWID;

-- Server commands ------------------------------------------------------------------------

-- One row per durable command. The primary key is the first request ID; the client and
-- idempotency-key pair adopts the same payload across transport attempts.
CREATE TABLE host_commands (
  request_id TEXT PRIMARY KEY,
  client_id TEXT NOT NULL,
  operation TEXT NOT NULL,
  idempotency_key TEXT NOT NULL,
  request_fingerprint TEXT NOT NULL CHECK (length(request_fingerprint) = 64),
  run_id TEXT,
  accepted_revision INTEGER,
  outcome TEXT NOT NULL CHECK (outcome IN ('accepted', 'rejected')),
  -- Digests of application/json blobs.
  receipt_hash TEXT,
  error_hash TEXT,
  created_at INTEGER NOT NULL,
  UNIQUE (client_id, idempotency_key),
  CHECK ((outcome = 'accepted') = (receipt_hash IS NOT NULL)),
  CHECK ((outcome = 'rejected') = (error_hash IS NOT NULL))
) STRICT;

-- Retention deletes a tree's receipts with it.
CREATE INDEX host_commands_by_run ON host_commands (run_id);

-- Every transport attempt (request ID) that named a stored command, so one request ID can
-- never name two payloads, even when it only adopted an earlier receipt.
CREATE TABLE host_command_requests (
  request_id TEXT PRIMARY KEY,
  command_request_id TEXT NOT NULL REFERENCES host_commands (request_id) ON DELETE CASCADE,
  request_fingerprint TEXT NOT NULL,
  received_at INTEGER NOT NULL
) STRICT;

CREATE INDEX host_command_requests_by_command ON host_command_requests (command_request_id);

-- Runner epochs --------------------------------------------------------------------------

CREATE TABLE run_workers (
  runner_epoch TEXT PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  generation INTEGER NOT NULL,
  server_epoch INTEGER NOT NULL,
  launch_envelope_hash TEXT NOT NULL,
  pid INTEGER,
  -- boot id + pid + /proc starttime: a reused PID never matches.
  process_start_identity TEXT,
  status TEXT NOT NULL CHECK (status = 'starting' OR status = 'ready' OR status = 'exited'
    OR status = 'cancelled' OR status = 'timedOut' OR status = 'crashed'
    OR status = 'claimLost' OR status = 'orphaned'),
  started_at INTEGER NOT NULL,
  ready_at INTEGER,
  finished_at INTEGER,
  exit_code INTEGER,
  signal INTEGER,
  diagnostic_hash TEXT,
  -- Set while a live runner does not answer the server's liveness pings (display only).
  unresponsive_since INTEGER,
  -- How often `unresponsive_since` changed: part of the run's presentation revision.
  liveness_changes INTEGER NOT NULL DEFAULT 0,
  CHECK ((finished_at IS NULL) = (status IN ('starting', 'ready'))),
  CHECK (unresponsive_since IS NULL OR status IN ('starting', 'ready'))
) STRICT;

CREATE UNIQUE INDEX run_workers_one_active_per_run ON run_workers (run_id)
  WHERE status IN ('starting', 'ready');
CREATE INDEX run_workers_by_run ON run_workers (run_id);

-- Receipts of accepted runner messages: a repeated message ID gets the same answer.
CREATE TABLE runner_messages (
  runner_epoch TEXT NOT NULL REFERENCES run_workers (runner_epoch) ON DELETE CASCADE,
  message_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  -- SHA-256 of the canonical message: a repeat must be the same message, not only the same ID.
  message_hash TEXT NOT NULL CHECK (length(message_hash) = 64),
  outcome TEXT NOT NULL CHECK (outcome IN ('accepted', 'rejected')),
  revision INTEGER,
  -- The small result a repeat must get again (e.g. an effect reservation), canonical JSON.
  result_json TEXT CHECK (result_json IS NULL OR length(result_json) <= 4096),
  created_at INTEGER NOT NULL,
  PRIMARY KEY (runner_epoch, message_id)
) STRICT, WITHOUT ROWID;

-- Processes a runner registered (a headless Pi child in its own process group). The server
-- stops a registered group whose runner ended first; the start identity keeps a reused PID
-- from ever matching.
CREATE TABLE runner_processes (
  runner_epoch TEXT NOT NULL REFERENCES run_workers (runner_epoch) ON DELETE CASCADE,
  pid INTEGER NOT NULL CHECK (pid > 1),
  process_start_identity TEXT NOT NULL,
  registered_at INTEGER NOT NULL,
  unregistered_at INTEGER,
  PRIMARY KEY (runner_epoch, pid)
) STRICT, WITHOUT ROWID;

-- Groups still registered (reaped after a runner dies, and at startup).
CREATE INDEX runner_processes_registered ON runner_processes (runner_epoch, pid) WHERE unregistered_at IS NULL;

-- View content ---------------------------------------------------------------------------

-- Generated referenced content, stored before it is advertised. A read must match run,
-- digest and media type, so a reference from another run or representation is unavailable.
CREATE TABLE run_view_content (
  run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
  content_hash TEXT NOT NULL CHECK (length(content_hash) = 64),
  media_type TEXT NOT NULL,
  byte_length INTEGER NOT NULL CHECK (byte_length >= 0),
  content BLOB NOT NULL CHECK (length(content) = byte_length),
  created_at INTEGER NOT NULL,
  PRIMARY KEY (run_id, content_hash, media_type)
) STRICT;
