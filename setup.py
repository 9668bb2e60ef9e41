from glob import glob

from setuptools import find_packages, setup

package_name = 'jax_perception_node'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    # The reference head's and the learned image encoder's shipped weights (jax-perception
    # train writes them).
    package_data={'jax_perception_node.detection.heads': ['*.npz'],
                  'jax_perception_node.detection.encoders': ['*.npz']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch',
         glob('launch/*.launch.py') + glob('launch/*.launch.xml')),
        ('share/' + package_name + '/config', glob('config/*.yaml') + glob('config/*.xml')),
        ('share/' + package_name + '/schema', glob('schema/*.json')),
        ('share/' + package_name + '/foxglove', glob('foxglove/*.json')),
    ],
    install_requires=['setuptools', 'numpy', 'jax', 'equinox', 'rosbags', 'pyyaml', 'pillow',
                      'simplejpeg', 'mcap'],
    # The node needs none of these: reports and pictures, peers, fleet replay.
    extras_require={'tools': ['matplotlib', 'psutil'], 'bench': ['torch', 'scipy', 'numba'],
                    'fleet': ['ray'], 'train': ['optax', 'matplotlib']},
    zip_safe=True,
    maintainer='jax_perception_node maintainers',
    maintainer_email='maintainers@jax-perception.invalid',
    description='Real-time LiDAR + camera BEV fusion on JAX that never recompiles.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'jax_perception_node = jax_perception_node.ros.node_console:node',
            'jax_perception_lifecycle_node = jax_perception_node.ros.node_console:lifecycle_node',
            'jax-perception = jax_perception_node.tools.console:main',
        ],
    },
)
