import type { FunctionComponent } from 'preact';
import { TraceList, TraceView } from './Traces';
import { Logs } from './Logs';
import { Apm } from './Apm';
import { Hosts } from './Hosts';
import { Errors } from './Errors';
import { ServiceMap } from './ServiceMap';
import { Events } from './Events';
import { Funnel } from './Funnel';
import { Retention } from './Retention';
import { ActiveUsers } from './ActiveUsers';
import { Cohorts } from './Cohorts';
import { Replays, ReplayView } from './Replays';
import { ApiKeys, Members, Projects, Usage } from './Settings';
import { Alerts } from './Alerts';
import { Webhooks } from './Webhooks';
import { Billing } from './Billing';

export interface PageProps {
  path: string;
  params: URLSearchParams;
}

interface NavItem {
  path: string;
  title: string;
  key?: string;
  page: FunctionComponent<PageProps>;
}

export const NAV: { title: string; items: NavItem[] }[] = [
  {
    title: 'Observability',
    items: [
      { path: '/traces', title: 'Traces', key: 't', page: TraceList },
      { path: '/logs', title: 'Logs', key: 'l', page: Logs },
      { path: '/apm', title: 'APM', key: 'a', page: Apm },
      { path: '/service-map', title: 'Service map', key: 'm', page: ServiceMap },
      { path: '/errors', title: 'Errors', key: 'e', page: Errors },
      { path: '/hosts', title: 'Hosts', key: 'h', page: Hosts },
    ],
  },
  {
    title: 'Product analytics',
    items: [
      { path: '/events', title: 'Events', key: 'v', page: Events },
      { path: '/funnels', title: 'Funnels', key: 'f', page: Funnel },
      { path: '/retention', title: 'Retention', key: 'r', page: Retention },
      { path: '/active-users', title: 'Active users', key: 'u', page: ActiveUsers },
      { path: '/cohorts', title: 'Cohorts', key: 'c', page: Cohorts },
      { path: '/replays', title: 'Session replays', key: 'p', page: Replays },
    ],
  },
  {
    title: 'Automation',
    items: [
      { path: '/alerts', title: 'Alerts', key: 'x', page: Alerts },
      { path: '/webhooks', title: 'Webhooks', key: 'w', page: Webhooks },
    ],
  },
  {
    title: 'Settings',
    items: [
      { path: '/settings/projects', title: 'Projects', page: Projects },
      { path: '/settings/members', title: 'Members', page: Members },
      { path: '/settings/api-keys', title: 'API keys', key: 'k', page: ApiKeys },
      { path: '/settings/usage', title: 'Usage', page: Usage },
      { path: '/settings/billing', title: 'Billing', page: Billing },
    ],
  },
];

function NotFound() {
  return (
    <>
      <h1>Not found</h1>
      <p>There is no page here.</p>
    </>
  );
}

export function pageFor(path: string): { title: string; render: FunctionComponent<PageProps> } {
  if (path === '/' || path === '') return { title: 'Traces', render: TraceList };
  if (path.startsWith('/traces/')) return { title: 'Trace', render: TraceView };
  if (path.startsWith('/replays/')) return { title: 'Replay', render: ReplayView };
  if (path.startsWith('/cohorts/')) return { title: 'Cohort', render: Cohorts };
  if (path.startsWith('/errors/')) return { title: 'Error group', render: Errors };
  for (const s of NAV) for (const i of s.items) if (i.path === path) return { title: i.title, render: i.page };
  return { title: 'Not found', render: NotFound };
}
