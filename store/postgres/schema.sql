-- dlock PostgreSQL schema, version 6 (version 5 with a hold's record:
-- holder, data, grant time, min-hold and max-hold, and the functions of
-- issue 38 (resume, force-release); version 5: version 4 with a fair lock
-- handed to its head waiter held no longer than the waiter's queue place
-- until it is claimed; version 4: version 3 with a reader's own token
-- refused the write side). Idempotent: New runs it at start
-- unless WithoutMigrate is given (then a DBA runs this file once).
--
-- dlock_locks   one row per lock that has been used: the row every operation
--               on the lock locks first (FOR UPDATE), and the last fence issued.
-- dlock_leases  one row per holder or queue place. Expiry is judged by the
--               database's clock (clock_timestamp()), never the client's.
--
-- kind: 0 mutex, 1 reentrant, 2 read-write, 3 fair, 4 semaphore, 6 election
-- (5: the fence rows of the advisory store); -1 is the
-- name's own row, which every acquire and release locks first (FOR UPDATE),
-- so that a name is one lock whatever kind asks, and which keeps the name's
-- one fence counter. mode: dlock.Mode (0 mutex, 1 reentrant, 2 read,
-- 3 write, 4 fair, 5 semaphore, 6 election). An election's hold keeps the
-- leader's value in owner.
--
-- Upgrading from an earlier schema: version 6 adds columns with constant
-- defaults (no table rewrite, but ALTER TABLE holds dlock_leases' exclusive
-- lock until the migration commits, a moment in which operations wait;
-- rows of earlier holds show an unknown holder)
-- and new functions (dlock_acquire_v6, dlock_release_v6, dlock_resume,
-- dlock_force_release). The functions earlier versions call,
-- dlock_acquire and dlock_release, stay, as wrappers of the new ones with
-- no record, so processes of an earlier dlock keep working beside upgraded
-- ones during a rolling upgrade, and dlock_acquire keeps the comment they
-- check ('dlock schema 5'), so they do not run their own schema again.

CREATE TABLE IF NOT EXISTS dlock_locks (
    kind       smallint    NOT NULL,
    name       text        NOT NULL,
    fence      bigint      NOT NULL DEFAULT 0,
    lim        integer     NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (kind, name)
);

CREATE TABLE IF NOT EXISTS dlock_leases (
    kind       smallint    NOT NULL,
    name       text        NOT NULL,
    token      text        NOT NULL,
    mode       smallint    NOT NULL,
    owner      text        NOT NULL,
    fence      bigint      NOT NULL,
    held       boolean     NOT NULL,      -- false: a queue place (fair ticket, writer intent)
    ticket     bigint      NOT NULL,      -- arrival order of queue places
    ttl_ms     bigint      NOT NULL,      -- lease length applied on handoff
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (kind, name, token)
);

CREATE INDEX IF NOT EXISTS dlock_leases_expires ON dlock_leases (expires_at);

-- A hold's record (schema 6), written by the grant and gone with the row:
-- holder and data as the caller gave them (shown only); since, the grant
-- by the database's clock (NULL for a queue place not yet granted, and for
-- rows of an earlier schema: holder unknown); min_ms, the min-hold (a
-- release before since + min_ms leaves the row, its token cleared so that
-- no caller holds it, to expire at since + min_ms); max_ms, the max-hold
-- (every grant and extend sets expires_at to at most since + max_ms).
-- 0 is none. A queue place keeps the record its grant will write.
ALTER TABLE dlock_leases ADD COLUMN IF NOT EXISTS holder text NOT NULL DEFAULT '';
ALTER TABLE dlock_leases ADD COLUMN IF NOT EXISTS data text NOT NULL DEFAULT '';
ALTER TABLE dlock_leases ADD COLUMN IF NOT EXISTS since timestamptz;
ALTER TABLE dlock_leases ADD COLUMN IF NOT EXISTS min_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE dlock_leases ADD COLUMN IF NOT EXISTS max_ms bigint NOT NULL DEFAULT 0;

-- Queue tickets (arrival order of fair waiters and writer intents).
CREATE SEQUENCE IF NOT EXISTS dlock_ticket_seq;

-- dlock_next_fence: the fence after p_last, with the hybrid clock floor of
-- every dlock store: max(last+1, now_ms*1000). Fences of one name are strictly
-- increasing (the caller holds the lock row); the floor keeps them above the
-- fences of an idle lock row that was swept, and comparable with the fences
-- other dlock stores issue, so switching backends never goes back.
CREATE OR REPLACE FUNCTION dlock_next_fence(p_last bigint, p_now timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT greatest(p_last + 1, floor(extract(epoch FROM p_now) * 1000)::bigint * 1000)
$$;

-- dlock_cap: the expiry p_exp of a hold granted at p_since, capped by its
-- max-hold p_max_ms (0: none).
CREATE OR REPLACE FUNCTION dlock_cap(p_exp timestamptz, p_since timestamptz, p_max_ms bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_max_ms > 0 AND p_since IS NOT NULL
        THEN least(p_exp, p_since + p_max_ms * interval '1 millisecond') ELSE p_exp END
$$;

-- dlock_acquire_v6: one attempt to grant (p_kind, p_name) to p_token.
-- Returns o_status ('acquired', 'locked:<held mode>', 'limit' (o_count: the
-- held limit) or 'upgrade'), the fence, the
-- remaining hold in ms when locked, the hold count (reentrant) and the queue
-- position. Idempotent per token: a token that holds gets the same fence
-- back and its lease refreshed to p_ttl_ms. An election (kind 6) passes the
-- candidate's value as p_owner; a new leader is notified like a release.
-- A new hold records p_holder, p_data, its grant time, p_min_ms (kinds 0, 3
-- and 6 only: the exclusive ones) and p_max_ms; a repeat by the holder and
-- a re-entry keep the first record (a re-entry joins the hold's). Every
-- expiry it sets is capped by the hold's max-hold (dlock_cap).
CREATE OR REPLACE FUNCTION dlock_acquire_v6(
    p_kind smallint, p_name text, p_token text, p_mode smallint, p_owner text,
    p_limit integer, p_ttl_ms bigint, p_queue boolean, p_queue_ttl_ms bigint,
    p_holder text, p_data text, p_min_ms bigint, p_max_ms bigint,
    OUT o_status text, OUT o_fence bigint, OUT o_retry_ms bigint, OUT o_count integer, OUT o_pos integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz;
    v_last   bigint;
    v_me     dlock_leases%ROWTYPE;
    v_found  boolean;
    v_held   integer;
    v_ok     boolean := false;
    v_join   boolean := false;
    v_ticket bigint;
    v_kfence bigint;
    v_lim    integer;
    v_cross  boolean := false;
    v_first  dlock_leases%ROWTYPE;
    v_since  timestamptz;
    o_held   smallint;
BEGIN
    o_status := 'locked'; o_fence := 0; o_retry_ms := 0; o_count := 0; o_pos := 0; o_held := p_mode;
    IF p_kind = 1 AND p_owner = '' THEN
        p_owner := p_token;
    END IF;
    -- The name's row first, then the kind's: every function locks them in
    -- this order.
    INSERT INTO dlock_locks (kind, name) VALUES (-1, p_name) ON CONFLICT DO NOTHING;
    SELECT l.fence INTO v_last FROM dlock_locks l WHERE l.kind = -1 AND l.name = p_name FOR UPDATE;
    INSERT INTO dlock_locks (kind, name) VALUES (p_kind, p_name) ON CONFLICT DO NOTHING;
    SELECT l.fence, l.lim INTO v_kfence, v_lim FROM dlock_locks l WHERE l.kind = p_kind AND l.name = p_name FOR UPDATE;
    v_last := greatest(v_last, v_kfence); -- the per-kind counters of schema 1
    v_now := clock_timestamp();
    DELETE FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.expires_at <= v_now;
    SELECT * INTO v_me FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.token = p_token;
    v_found := FOUND;
    SELECT count(*)::integer INTO v_held FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.held;

    -- A reader's own token asking for the write side is an upgrade, not
    -- the repeat of a write: refused like a writer naming it as Owner.
    IF v_found AND v_me.held AND p_kind = 2 AND p_mode = 3 AND v_me.mode = 2 THEN
        o_status := 'upgrade';
        RETURN;
    END IF;
    IF v_found AND v_me.held THEN
        o_status := 'acquired';
        o_fence := v_me.fence;
        o_count := CASE WHEN p_kind = 1 THEN v_held ELSE 1 END;
        IF p_kind = 1 THEN
            -- A reentrant hold has one expiry, pushed out, never in.
            UPDATE dlock_leases s SET expires_at = greatest(s.expires_at, dlock_cap(v_now + p_ttl_ms * interval '1 millisecond', s.since, s.max_ms))
                WHERE s.kind = p_kind AND s.name = p_name AND s.held;
        ELSE
            UPDATE dlock_leases s SET expires_at = dlock_cap(v_now + p_ttl_ms * interval '1 millisecond', s.since, s.max_ms), ttl_ms = p_ttl_ms
                WHERE s.kind = p_kind AND s.name = p_name AND s.token = p_token;
        END IF;
        RETURN;
    END IF;

    -- A name is one lock: a live hold of another kind refuses the request.
    SELECT max(s.mode), coalesce(ceil(extract(epoch FROM max(s.expires_at) - v_now) * 1000)::bigint, 0)
        INTO o_held, o_retry_ms
        FROM dlock_leases s WHERE s.name = p_name AND s.kind <> p_kind AND s.held AND s.expires_at > v_now
        GROUP BY s.kind LIMIT 1;
    IF FOUND THEN
        v_cross := true;
    ELSE
        o_held := p_mode; o_retry_ms := 0;
    END IF;

    IF p_kind = 4 AND v_held > 0 AND v_lim <> p_limit THEN
        o_status := 'limit'; o_count := v_lim;
        RETURN;
    END IF;

    IF v_cross THEN
        v_ok := false;
    ELSIF p_kind = 0 OR p_kind = 6 THEN
        v_ok := v_held = 0;
    ELSIF p_kind = 1 THEN
        IF v_held = 0 THEN
            v_ok := true;
        ELSIF NOT EXISTS (SELECT 1 FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.held AND s.owner <> p_owner) THEN
            v_ok := true;
            v_join := true;
        END IF;
    ELSIF p_kind = 2 AND p_mode = 2 THEN
        -- A reader gets in unless a writer holds the lock or waits for it;
        -- a reader whose Owner is the holding writer's token is let in
        -- beside it (a downgrade).
        v_ok := (p_owner <> '' AND EXISTS (SELECT 1 FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.held AND s.mode = 3 AND s.token = p_owner))
            OR NOT EXISTS (SELECT 1 FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND (s.mode = 3 OR NOT s.held));
        v_join := true;
    ELSIF p_kind = 2 OR p_kind = 3 THEN
        -- A writer whose Owner is the token of a reader holding the lock
        -- would deadlock waiting for itself.
        IF p_kind = 2 AND p_owner <> '' AND EXISTS (SELECT 1 FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.held AND s.mode = 2 AND s.token = p_owner) THEN
            o_status := 'upgrade';
            RETURN;
        END IF;
        -- Writers and fair waiters get in when nobody holds the lock and
        -- nobody queued before them waits.
        v_ok := v_held = 0 AND NOT EXISTS (
            SELECT 1 FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND NOT s.held AND s.token <> p_token
            AND s.ticket < CASE WHEN v_found THEN v_me.ticket ELSE 9223372036854775807 END);
    ELSE
        v_ok := v_held < p_limit;
    END IF;

    IF v_ok THEN
        IF p_kind = 4 THEN
            UPDATE dlock_locks l SET lim = p_limit WHERE l.kind = p_kind AND l.name = p_name;
        END IF;
        -- The record: a re-entry joins the hold's (its first grant's).
        v_since := v_now;
        v_first.holder := p_holder; v_first.data := p_data; v_first.max_ms := p_max_ms;
        v_first.min_ms := CASE WHEN p_kind IN (0, 3, 6) THEN p_min_ms ELSE 0 END;
        IF v_join AND p_kind = 1 THEN
            SELECT * INTO v_first FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.held ORDER BY s.since LIMIT 1;
            o_fence := v_first.fence; v_since := v_first.since;
            UPDATE dlock_leases s SET expires_at = greatest(s.expires_at, dlock_cap(v_now + p_ttl_ms * interval '1 millisecond', s.since, s.max_ms))
                WHERE s.kind = p_kind AND s.name = p_name AND s.held;
        ELSIF v_join THEN
            -- A reader gets the current fence: the last writer's, or a new
            -- one if there has been no grant yet.
            IF v_last = 0 THEN
                v_last := dlock_next_fence(0, v_now);
                UPDATE dlock_locks l SET fence = v_last, updated_at = v_now WHERE l.kind IN (-1, p_kind) AND l.name = p_name;
            END IF;
            o_fence := v_last;
        END IF;
        IF o_fence = 0 THEN
            o_fence := dlock_next_fence(v_last, v_now);
            UPDATE dlock_locks l SET fence = o_fence, updated_at = v_now WHERE l.kind IN (-1, p_kind) AND l.name = p_name;
        END IF;
        INSERT INTO dlock_leases AS s (kind, name, token, mode, owner, fence, held, ticket, ttl_ms, expires_at, holder, data, since, min_ms, max_ms)
        VALUES (p_kind, p_name, p_token, p_mode, p_owner, o_fence, true, 0, p_ttl_ms,
            dlock_cap(v_now + p_ttl_ms * interval '1 millisecond', v_since, v_first.max_ms),
            v_first.holder, v_first.data, v_since, v_first.min_ms, v_first.max_ms)
        ON CONFLICT (kind, name, token) DO UPDATE SET mode = excluded.mode, owner = excluded.owner, fence = excluded.fence,
            held = true, ttl_ms = excluded.ttl_ms, expires_at = excluded.expires_at, holder = excluded.holder,
            data = excluded.data, since = excluded.since, min_ms = excluded.min_ms, max_ms = excluded.max_ms;
        o_status := 'acquired';
        o_count := CASE WHEN p_kind = 1 THEN v_held + 1 ELSE 1 END;
        IF p_kind = 6 THEN
            PERFORM pg_notify('dlock', p_kind::text || ':' || p_name); -- observers: a new leader
        END IF;
        RETURN;
    END IF;

    -- Refused: how long the hold has left (the soonest permit of a
    -- semaphore), else how long the queue head's place has left.
    IF NOT v_cross THEN
        SELECT coalesce(ceil(extract(epoch FROM
                   (CASE WHEN p_kind = 4 THEN min(s.expires_at) ELSE max(s.expires_at) END) - v_now) * 1000)::bigint, 0),
               coalesce(max(s.mode), p_mode)
            INTO o_retry_ms, o_held
            FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.held;
    END IF;
    IF o_retry_ms = 0 THEN
        SELECT coalesce(ceil(extract(epoch FROM s.expires_at - v_now) * 1000)::bigint, 0) INTO o_retry_ms
            FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND NOT s.held ORDER BY s.ticket LIMIT 1;
        o_retry_ms := coalesce(o_retry_ms, 0);
    END IF;

    v_ticket := CASE WHEN v_found THEN v_me.ticket ELSE 9223372036854775807 END;
    IF p_queue AND (p_kind = 3 OR (p_kind = 2 AND p_mode = 3)) THEN
        IF v_found THEN
            UPDATE dlock_leases s SET expires_at = v_now + p_queue_ttl_ms * interval '1 millisecond', ttl_ms = p_ttl_ms
                WHERE s.kind = p_kind AND s.name = p_name AND s.token = p_token;
        ELSE
            v_ticket := nextval('dlock_ticket_seq');
            -- The place keeps the record its grant will write.
            INSERT INTO dlock_leases (kind, name, token, mode, owner, fence, held, ticket, ttl_ms, expires_at, holder, data, min_ms, max_ms)
            VALUES (p_kind, p_name, p_token, p_mode, p_owner, 0, false, v_ticket, p_ttl_ms, v_now + p_queue_ttl_ms * interval '1 millisecond',
                p_holder, p_data, CASE WHEN p_kind = 3 THEN p_min_ms ELSE 0 END, p_max_ms);
        END IF;
    END IF;
    -- Position: the caller's place in the queue, or the queue's length.
    SELECT count(*)::integer INTO o_pos FROM dlock_leases s
        WHERE s.kind = p_kind AND s.name = p_name AND NOT s.held AND s.ticket < v_ticket;
    -- "locked:<mode>": the dlock.Mode of the hold that refused.
    o_status := 'locked:' || o_held;
END
$$;

-- dlock_release_v6: drops p_token's hold or queue place; false when it has
-- neither (or its lease has expired). An exclusive hold released before its
-- min-hold end keeps its row to that end, its token cleared (nobody holds
-- it: no extend, release or resume finds it), and nothing is notified. A
-- fair lock left free is handed to the head of its queue in the same
-- transaction. Watchers are notified on channel 'dlock' with payload
-- '<kind>:<name>' (delivered at commit).
CREATE OR REPLACE FUNCTION dlock_release_v6(p_kind smallint, p_name text, p_token text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_now  timestamptz;
    v_last bigint;
    v_head dlock_leases%ROWTYPE;
    v_me   dlock_leases%ROWTYPE;
BEGIN
    IF p_token = '' THEN
        RETURN false; -- the token of a row kept by its min-hold
    END IF;
    SELECT l.fence INTO v_last FROM dlock_locks l WHERE l.kind = -1 AND l.name = p_name FOR UPDATE;
    v_last := coalesce(v_last, 0);
    SELECT greatest(v_last, l.fence) INTO v_last FROM dlock_locks l WHERE l.kind = p_kind AND l.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_now := clock_timestamp();
    DELETE FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.expires_at <= v_now;
    SELECT * INTO v_me FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.token = p_token;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_me.held AND v_me.min_ms > 0 AND v_me.since + v_me.min_ms * interval '1 millisecond' > v_now THEN
        UPDATE dlock_leases s SET token = '', expires_at = v_me.since + v_me.min_ms * interval '1 millisecond'
            WHERE s.kind = p_kind AND s.name = p_name AND s.token = p_token;
        RETURN true;
    END IF;
    DELETE FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.token = p_token;
    IF p_kind = 3 AND NOT EXISTS (SELECT 1 FROM dlock_leases s WHERE s.name = p_name AND s.held AND s.expires_at > v_now) THEN
        SELECT * INTO v_head FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND NOT s.held ORDER BY s.ticket LIMIT 1;
        IF FOUND THEN
            v_last := dlock_next_fence(v_last, v_now);
            -- Held for the waiter until its queue deadline at most (the
            -- claim window): alive, it claims its TTL by its next acquire
            -- before its place would have run out; dead, it keeps the
            -- others waiting no longer than its place would have. Its
            -- record (kept with its place) is granted now.
            UPDATE dlock_leases s SET held = true, fence = v_last, since = v_now,
                expires_at = dlock_cap(least(v_head.expires_at, v_now + v_head.ttl_ms * interval '1 millisecond'), v_now, v_head.max_ms)
                WHERE s.kind = p_kind AND s.name = p_name AND s.token = v_head.token;
            UPDATE dlock_locks l SET fence = v_last, updated_at = v_now WHERE l.kind IN (-1, p_kind) AND l.name = p_name;
        END IF;
    END IF;
    PERFORM pg_notify('dlock', p_kind::text || ':' || p_name);
    RETURN true;
END
$$;

-- dlock_resume: confirms that p_token holds (p_kind, p_name) in p_mode and
-- extends its lease to p_ttl_ms, capped by its max-hold (a reentrant hold's
-- one expiry is pushed out, never in). o_ok false: not held, nothing
-- changed. o_ttl_ms is what the lease was extended to, o_max_left_ms what is
-- left of the max-hold (0: none), o_count the reentrant hold count.
CREATE OR REPLACE FUNCTION dlock_resume(p_kind smallint, p_name text, p_token text, p_mode smallint, p_ttl_ms bigint,
    OUT o_ok boolean, OUT o_fence bigint, OUT o_count integer, OUT o_ttl_ms bigint, OUT o_max_left_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz;
    v_me  dlock_leases%ROWTYPE;
    v_exp timestamptz;
BEGIN
    o_ok := false; o_fence := 0; o_count := 0; o_ttl_ms := 0; o_max_left_ms := 0;
    IF p_token = '' THEN
        RETURN;
    END IF;
    PERFORM 1 FROM dlock_locks l WHERE l.kind = -1 AND l.name = p_name FOR UPDATE;
    PERFORM 1 FROM dlock_locks l WHERE l.kind = p_kind AND l.name = p_name FOR UPDATE;
    v_now := clock_timestamp();
    SELECT * INTO v_me FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.token = p_token
        AND s.held AND s.mode = p_mode AND s.expires_at > v_now;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_exp := dlock_cap(v_now + p_ttl_ms * interval '1 millisecond', v_me.since, v_me.max_ms);
    IF p_kind = 1 THEN
        UPDATE dlock_leases s SET expires_at = greatest(s.expires_at, v_exp)
            WHERE s.kind = p_kind AND s.name = p_name AND s.held AND s.expires_at > v_now;
        SELECT count(*)::integer INTO o_count FROM dlock_leases s WHERE s.kind = p_kind AND s.name = p_name AND s.held;
    ELSE
        UPDATE dlock_leases s SET expires_at = v_exp, ttl_ms = p_ttl_ms
            WHERE s.kind = p_kind AND s.name = p_name AND s.token = p_token;
        o_count := 1;
    END IF;
    o_ok := true;
    o_fence := v_me.fence;
    o_ttl_ms := floor(extract(epoch FROM v_exp - v_now) * 1000)::bigint;
    IF v_me.max_ms > 0 AND v_me.since IS NOT NULL THEN
        o_max_left_ms := greatest(floor(extract(epoch FROM v_me.since + v_me.max_ms * interval '1 millisecond' - v_now) * 1000)::bigint, 0);
    END IF;
END
$$;

-- dlock_force_release: ends every hold of p_name, of every kind and token
-- (one kept by its min-hold too), and returns the live ones ended (a
-- reentrant hold once). Queue places stay; the fence counters are kept, so
-- the next grant's fence is above the ended holds'. Watchers are notified
-- as by a release.
CREATE OR REPLACE FUNCTION dlock_force_release(p_name text)
    RETURNS TABLE (o_holder text, o_since timestamptz, o_data text, o_fence bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_now   timestamptz;
    v_kinds smallint[] := '{}';
    v_re    boolean := false;
    r       record;
BEGIN
    -- The name's row serialises this against every acquire, release and
    -- resume of the name (each locks it first).
    PERFORM 1 FROM dlock_locks l WHERE l.kind = -1 AND l.name = p_name FOR UPDATE;
    v_now := clock_timestamp();
    FOR r IN DELETE FROM dlock_leases s WHERE s.name = p_name AND s.held
            RETURNING s.kind, s.holder, s.since, s.data, s.fence, s.expires_at LOOP
        IF NOT r.kind = ANY (v_kinds) THEN
            v_kinds := v_kinds || r.kind;
            PERFORM pg_notify('dlock', r.kind::text || ':' || p_name);
        END IF;
        CONTINUE WHEN r.expires_at <= v_now;
        IF r.kind = 1 THEN
            CONTINUE WHEN v_re; -- a reentrant hold's rows share its record
            v_re := true;
        END IF;
        o_holder := r.holder; o_since := r.since; o_data := r.data; o_fence := r.fence;
        RETURN NEXT;
    END LOOP;
END
$$;

-- The functions of schema 5, kept for processes of an earlier dlock during
-- a rolling upgrade: the same calls, with no record.
CREATE OR REPLACE FUNCTION dlock_acquire(
    p_kind smallint, p_name text, p_token text, p_mode smallint, p_owner text,
    p_limit integer, p_ttl_ms bigint, p_queue boolean, p_queue_ttl_ms bigint,
    OUT o_status text, OUT o_fence bigint, OUT o_retry_ms bigint, OUT o_count integer, OUT o_pos integer)
LANGUAGE sql AS $$
    SELECT * FROM dlock_acquire_v6(p_kind, p_name, p_token, p_mode, p_owner, p_limit, p_ttl_ms, p_queue, p_queue_ttl_ms, '', '', 0, 0)
$$;

CREATE OR REPLACE FUNCTION dlock_release(p_kind smallint, p_name text, p_token text) RETURNS boolean
LANGUAGE sql AS $$
    SELECT dlock_release_v6(p_kind, p_name, p_token)
$$;

COMMENT ON FUNCTION dlock_acquire(smallint, text, text, smallint, text, integer, bigint, boolean, bigint) IS 'dlock schema 5';
COMMENT ON FUNCTION dlock_acquire_v6(smallint, text, text, smallint, text, integer, bigint, boolean, bigint, text, text, bigint, bigint) IS 'dlock schema 6';
