#!/usr/bin/env python3
"""
Build the interface packages in this folder into a Python prefix (the venv) with rosidl.

tf2_msgs, grid_map_msgs, vision_msgs, autoware_internal_debug_msgs, autoware_perception_msgs,
autoware_internal_msgs and bond have no wheels. On a real ROS install they come from apt; here
every sub-folder with a package.xml is a plain ament_cmake project, configured with cmake
against the ROS wheels' own generator toolchain (the C and Python generators: what rclpy loads,
see wheel_includes.cmake) and installed into the prefix itself: the libraries carry no RPATH,
and the venv's start-up hook already puts <prefix>/lib on LD_LIBRARY_PATH. A stamp in the
prefix holds a hash of the definitions and of the toolchain versions; while it matches,
nothing is rebuilt (``--force`` rebuilds anyway).

Run with the venv's python: ``.venv/bin/python interfaces/build_interfaces.py``.
"""

import argparse
import concurrent.futures
import hashlib
import importlib.metadata
import os
from pathlib import Path
import shutil
import subprocess
import sys
import sysconfig
import time
import xml.etree.ElementTree as ElementTree

HERE = Path(__file__).resolve().parent
STAMP_NAME = '.interfaces'
# Re-pointed at this interpreter's headers at the end of every configure (see the file).
WHEEL_INCLUDES = HERE / 'wheel_includes.cmake'


class BuildError(Exception):
    """An interface package failed to configure, build or install."""


def interface_packages(root):
    """Return {name: (folder, dependencies)} for every package.xml directly under root."""
    packages = {}
    for manifest in sorted(root.glob('*/package.xml')):
        tree = ElementTree.parse(manifest)
        name = tree.findtext('name').strip()
        deps = {e.text.strip() for e in tree.iter() if e.tag in ('depend', 'build_depend')}
        packages[name] = (manifest.parent, deps)
    return packages


def build_order(packages):
    """Names in dependency order: a package comes after the ones of this folder it depends on."""
    order, visiting = [], set()

    def visit(name):
        if name in order:
            return
        if name in visiting:
            raise BuildError(f'dependency cycle through {name}')
        visiting.add(name)
        for dep in sorted(packages[name][1] & packages.keys()):
            visit(dep)
        order.append(name)

    for name in sorted(packages):
        visit(name)
    return order


def toolchain_versions():
    """Return the installed ROS wheel versions (generators, runtime, base messages), sorted."""
    lines = set()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata['Name'] or '').lower().replace('_', '-')
        if name.startswith('ros-') and not name.startswith('ros-jazzy-'):
            lines.add(f'{name}=={dist.version}')
    return sorted(lines)


def definitions_hash(root):
    """Hash every file under root (paths and bytes) and the toolchain versions, as hex."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob('*') if p.is_file()):
        if '__pycache__' in path.parts:
            continue
        digest.update(path.relative_to(root).as_posix().encode() + b'\0')
        digest.update(path.read_bytes() + b'\0')
    digest.update('\n'.join(toolchain_versions()).encode())
    return digest.hexdigest()


def build_environment(prefix):
    """Return the environment of cmake and the generators it runs; it never leaves the build."""
    env = dict(os.environ)
    lib = str(prefix / 'lib')
    site = Path(sysconfig.get_paths(vars={'base': str(prefix)})['purelib'])
    wheel_libs = [str(p) for p in sorted(site.glob('ros_*.libs'))]
    env['LD_LIBRARY_PATH'] = os.pathsep.join(
        [lib, *wheel_libs, *filter(None, env.get('LD_LIBRARY_PATH', '').split(os.pathsep))])
    # The generators are this venv's python: the start-up hook must not re-exec them.
    env['_ROS_WHEELS_BOOTSTRAP_COMPLETE'] = '1'
    env['AMENT_PREFIX_PATH'] = str(prefix)
    env['CMAKE_PREFIX_PATH'] = str(prefix)
    env['PATH'] = os.pathsep.join([str(prefix / 'bin'), env.get('PATH', '')])
    return env


def cmake_arguments(source, build, prefix):
    """Return the configure command line of one package."""
    import numpy  # the generators need it anyway; imported here to keep --help light
    args = ['cmake', '-S', str(source), '-B', str(build),
            f'-DCMAKE_INSTALL_PREFIX={prefix}',
            f'-DCMAKE_PREFIX_PATH={prefix}',
            '-DCMAKE_BUILD_TYPE=Release',
            '-DBUILD_TESTING=OFF',
            f'-DPython3_EXECUTABLE={sys.executable}',
            f'-DPYTHON_EXECUTABLE={sys.executable}',
            f'-DCMAKE_PROJECT_INCLUDE={WHEEL_INCLUDES}',
            f"-DJPN_PYTHON_INCLUDE={sysconfig.get_paths()['include']}",
            f'-DJPN_NUMPY_INCLUDE={numpy.get_include()}']
    if shutil.which('ninja'):
        args += ['-G', 'Ninja']
    return args


def run_logged(command, env, log):
    """Run command with its output appended to log; raise BuildError naming the log on failure."""
    with open(log, 'a') as out:
        out.write('$ ' + ' '.join(command) + '\n')
        out.flush()
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise BuildError(f"'{command[0]} {command[1]}' failed ({done.returncode}), see {log}")


def build_package(name, source, prefix, jobs, env):
    """Configure, build and install one package from a fresh build folder; return seconds."""
    start = time.monotonic()
    build = prefix / 'interfaces-build' / name
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    log = build.parent / f'{name}.log'
    log.unlink(missing_ok=True)
    run_logged(cmake_arguments(source, build, prefix), env, log)
    run_logged(['cmake', '--build', str(build), '--parallel', str(jobs)], env, log)
    run_logged(['cmake', '--install', str(build)], env, log)
    shutil.rmtree(build)
    return time.monotonic() - start


def build_all(packages, prefix, jobs, at_once, env):
    """
    Build every package, ``at_once`` at a time, each after those of this folder it depends on.

    Much of a package's build runs on one core (its configure, the generators): two at once
    keep both busier, 44 s for the seven here against 56 s one after the other. The first
    failure is raised once the builds under way have ended.
    """
    order = build_order(packages)
    done, running = set(), {}
    with concurrent.futures.ThreadPoolExecutor(max(1, at_once)) as pool:
        while order or running:
            ready = [name for name in order if packages[name][1] & packages.keys() <= done]
            for name in ready[:max(1, at_once) - len(running)]:
                order.remove(name)
                running[pool.submit(build_package, name, packages[name][0], prefix, jobs,
                                    env)] = name
            finished, _ = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                name = running.pop(future)
                if future.exception() is not None:
                    order.clear()       # start nothing more; the running ones end
                    concurrent.futures.wait(running)
                    raise future.exception()
                done.add(name)
                print(f'interfaces: {name} built in {future.result():.0f} s', flush=True)


def main(argv=None):
    """Build what changed since the stamp; return a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--prefix', type=Path, default=Path(sys.prefix),
                        help='install prefix, the venv (default: this python)')
    parser.add_argument('--jobs', type=int, default=2,
                        help='parallel compile jobs of one package (2)')
    parser.add_argument('--packages-at-once', type=int, default=2,
                        help='packages built at the same time (2)')
    parser.add_argument('--force', action='store_true', help='rebuild even if the stamp matches')
    args = parser.parse_args(argv)
    prefix = args.prefix.resolve()
    stamp = prefix / STAMP_NAME
    wanted = definitions_hash(HERE)
    if not args.force and stamp.is_file() and stamp.read_text().strip() == wanted:
        print('interfaces: up to date')
        stamp.touch()   # newer than what make compares it with: no check next time
        return 0
    stamp.unlink(missing_ok=True)
    packages = interface_packages(HERE)
    env = build_environment(prefix)
    try:
        build_all(packages, prefix, args.jobs, args.packages_at_once, env)
    except BuildError as error:
        print(f'interfaces: {error}', file=sys.stderr)
        return 1
    stamp.write_text(wanted + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
