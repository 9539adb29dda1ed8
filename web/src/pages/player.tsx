// rrweb's player, in a chunk of its own (loaded by the replay page only).
import rrwebPlayer from 'rrweb-player';
import 'rrweb-player/dist/style.css';

export function mount(
  target: HTMLElement,
  events: unknown[],
  width: number,
  height: number,
  onProgress: (atMs: number, totalMs: number, state: string) => void,
) {
  const player = new rrwebPlayer({
    target,
    props: { events: events as any, width, height, autoPlay: true, showController: true, skipInactive: true },
  });
  const total = () => player.getMetaData().totalTime;
  let state = 'playing';
  player.addEventListener('ui-update-current-time', (e: any) => onProgress(e.payload, total(), state));
  player.addEventListener('ui-update-player-state', (e: any) => {
    state = e.payload;
    onProgress(player.getReplayer().getCurrentTime(), total(), state);
  });
  onProgress(0, total(), state);
  return player;
}
