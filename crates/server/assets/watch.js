// corelay viewer (/watch/{room}): a receive-only WHEP session. Shares
// CorelaySession/CorelayGrid with the room page (app.js, loaded first).
'use strict';

(() => {
  const { intParam, boolParam } = window.corelayParams;
  const $ = (id) => document.getElementById(id);
  const statusEl = $('status');
  const setStatus = (text, cls) => {
    statusEl.textContent = text;
    statusEl.className = `status ${cls || ''}`;
  };

  // /watch/{room}; the room is the last path segment.
  const parts = location.pathname.split('/').filter(Boolean);
  const room = decodeURIComponent(parts[parts.length - 1] || '');
  document.title = `${room} · corelay viewer`;
  $('room-label').textContent = room;

  let session = null;
  let grid = null;

  async function watch() {
    $('start-watch').hidden = true;
    session = new window.CorelaySession({
      endpoint: `/whep/${encodeURIComponent(room)}`,
      stream: null,
      videoSlots: intParam('slots', 3, 1, 16),
      audioSlots: intParam('audioslots', 3, 0, 16),
      absCaptureTime: boolParam('abscapture', true),
    });
    grid = new window.CorelayGrid(session, $('grid'), $('audio-sinks'));
    window.corelayExpose(session, grid);
    session.addEventListener('state', (e) => {
      document.body.dataset.state = e.detail.state;
      if (e.detail.state === 'connected') setStatus('watching', 'ok');
      else if (e.detail.state === 'failed' || e.detail.state === 'error') setStatus(e.detail.detail || e.detail.state, 'error');
    });
    const updateEmpty = () => {
      const n = grid.tiles().length;
      if (session.state === 'connected') setStatus(n ? `watching ${n} stream${n === 1 ? '' : 's'}` : 'nobody is publishing', 'ok');
    };
    // The server no longer knows this viewer (an ICE restart got 404):
    // watch again.
    session.addEventListener('gone', async () => {
      const old = session;
      grid.clear();
      await old.leave();
      watch();
    });
    session.addEventListener('slots', updateEmpty);
    session.addEventListener('state', updateEmpty);
    try {
      await session.start();
      setStatus('connecting…');
    } catch (err) {
      setStatus(`watch failed: ${err.message}`, 'error');
      document.body.dataset.state = 'error';
    }
  }

  $('toggle-stats').addEventListener('click', (e) => {
    const on = e.currentTarget.getAttribute('aria-pressed') !== 'true';
    e.currentTarget.setAttribute('aria-pressed', String(on));
    e.currentTarget.textContent = on ? 'Hide stats' : 'Show stats';
    grid?.setStatsVisible(on);
  });
  $('start-watch').addEventListener('click', watch);
  window.addEventListener('pagehide', () => session?.leaveOnUnload());

  if (!room) {
    setStatus('no room in the address (/watch/{room})', 'error');
  } else if (boolParam('autoplay', true)) {
    // Muted video may autoplay; audio may need the click in some browsers.
    watch();
  } else {
    $('start-watch').hidden = false;
    setStatus('press Watch');
  }
})();
